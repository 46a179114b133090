#!/usr/bin/env bash
# Give this machine a Docker-compatible engine for the Docker workspace tests, from Debian's
# packages only (no registry): podman 4 with runc, and an image built with debootstrap.
#
#   bash scripts/podman-docker.sh        # as root; prints the DOCKER_HOST line to use
#
# Every step is bounded and idempotent: packages, configuration and the image are made once and
# reused; the API service is started detached (its output goes to a log file, never to the
# caller's stdout, so a CI runner waiting for end-of-output is not held open by it).
# Exit status 0: the engine answers at $SOCK. Non-zero: a one-line reason on stderr.
set -euo pipefail

IMAGE="${MNEMOSCOPE_DOCKER_IMAGE:-localhost/mnemoscope-test:latest}"
RUN_DIR=/run/mnemoscope-podman
SOCK="$RUN_DIR/podman.sock"
LOG=/var/log/mnemoscope-podman.log
say() { echo "podman-docker: $*" >&2; }

if [ "$(id -u)" != 0 ]; then say "needs root (installs packages, runs the engine)"; exit 1; fi

if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
  say "installing podman, runc, debootstrap"
  timeout 600 apt-get update -qq </dev/null
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq podman runc debootstrap \
    </dev/null >/dev/null
fi

# crun (podman's default here) cannot set the default rlimits nor handle this host's hybrid
# cgroups; runc with the cgroupfs manager works.
CONF=/etc/containers/containers.conf
WANT='# written by mnemoscope scripts/podman-docker.sh
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[engine.runtimes]
runc = ["/usr/sbin/runc"]'
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$WANT" ]; then
  mkdir -p /etc/containers
  printf '%s\n' "$WANT" > "$CONF"
fi

if ! timeout 60 podman image exists "$IMAGE" </dev/null; then
  say "building $IMAGE with debootstrap (about a minute)"
  ROOTFS=$(mktemp -d /var/tmp/mnemoscope-rootfs.XXXXXX)
  trap 'rm -rf "$ROOTFS"' EXIT
  timeout 900 debootstrap --variant=minbase --include=python3 bookworm "$ROOTFS" \
    http://deb.debian.org/debian </dev/null >"$LOG.debootstrap" 2>&1 \
    || { say "debootstrap failed (see $LOG.debootstrap)"; exit 1; }
  timeout 600 tar -C "$ROOTFS" -c . | timeout 600 podman import - "$IMAGE" >/dev/null
fi

if ! timeout 10 curl -sf --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1; then
  mkdir -p "$RUN_DIR"
  rm -f "$SOCK"
  # setsid + all three standard streams redirected: fully detached from the caller
  setsid podman system service --time=0 "unix://$SOCK" </dev/null >"$LOG" 2>&1 &
  echo $! > "$RUN_DIR/service.pid"
  for _ in $(seq 1 60); do
    timeout 5 curl -sf --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1 && break
    sleep 1
  done
fi
if ! timeout 10 curl -sf --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1; then
  say "the podman API service did not answer at $SOCK (see $LOG)"; exit 1
fi
echo "DOCKER_HOST=unix://$SOCK"
