"""Shared fixtures.

Service fixtures (``redis_url``, ``postgres_url``, ``mariadb_url``) check that the server
answers. When it does not, the test is skipped with a message saying what to start; with
``MNEMOSCOPE_REQUIRE_SERVICES=1`` (set by ``.ci/run``) it fails instead, so CI never
silently skips the real-server tests.
"""

from __future__ import annotations

import os
import socket
import uuid

import pytest

# mem0 phones home and opens a second Qdrant store under ~/.mem0 unless told not to
os.environ.setdefault("MEM0_TELEMETRY", "False")

REQUIRE_SERVICES = os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1"

REDIS_URL = os.environ.get("MNEMOSCOPE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get(
    "MNEMOSCOPE_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
MARIADB_URL = os.environ.get(
    "MNEMOSCOPE_TEST_MARIADB_URL", "mysql+aiomysql://root@127.0.0.1:3306/test"
)

_HOW_TO_START = {
    "Redis": "start one with: redis-server --daemonize yes --port 6379",
    "PostgreSQL": "start it with: pg_ctlcluster $(ls /etc/postgresql) main start "
    "(trust auth, database 'test')",
    "MariaDB": "start it with: start-stop-daemon --start --background --exec /usr/sbin/mariadbd "
    "(root without password, database 'test')",
}


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip (or fail under MNEMOSCOPE_REQUIRE_SERVICES=1) when the service is down."""
    if _port_open(host, port):
        return
    msg = f"{name} is not reachable on {host}:{port}; {_HOW_TO_START[name]}"
    if REQUIRE_SERVICES:
        pytest.fail(msg + " (MNEMOSCOPE_REQUIRE_SERVICES=1 forbids skipping)")
    pytest.skip(msg)


@pytest.fixture
def redis_url() -> str:
    require_service("Redis", "127.0.0.1", 6379)
    pytest.importorskip("redis", reason="the 'redis' extra is not installed")
    return REDIS_URL


@pytest.fixture
def postgres_url() -> str:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    pytest.importorskip("asyncpg", reason="the 'sql' extra is not installed")
    return POSTGRES_URL


@pytest.fixture
def mariadb_url() -> str:
    require_service("MariaDB", "127.0.0.1", 3306)
    pytest.importorskip("aiomysql", reason="the 'sql' extra is not installed")
    return MARIADB_URL


@pytest.fixture
def unique_id() -> str:
    """A fresh id so tests sharing a server never see each other's data."""
    return uuid.uuid4().hex[:12]


@pytest.fixture
def service_checker():  # type: ignore[no-untyped-def]
    """The ``require_service(name, host, port)`` function, for tests that decide at run time."""
    return require_service


# Docker: the tests need an engine (Docker, or podman's Docker-compatible API) and an image that
# is already on it, since no registry is reachable here. `bash scripts/podman-docker.sh` sets up
# both from Debian's packages; MNEMOSCOPE_REQUIRE_DOCKER=1 (set by .ci/run when that worked)
# turns these skips into failures.
DOCKER_IMAGE = os.environ.get("MNEMOSCOPE_DOCKER_IMAGE", "localhost/mnemoscope-test:latest")
REQUIRE_DOCKER = os.environ.get("MNEMOSCOPE_REQUIRE_DOCKER") == "1"


def _docker_reason() -> str | None:
    try:
        import docker
    except ImportError:
        return "the 'docker' extra is not installed (pip install 'mnemoscope[docker]')"
    try:
        client = docker.from_env(timeout=10)
    except Exception as exc:
        return f"no Docker engine configured ({exc}); run `bash scripts/podman-docker.sh` as root"
    try:
        client.ping()
        client.images.get(DOCKER_IMAGE)
    except docker.errors.ImageNotFound:
        return (
            f"image {DOCKER_IMAGE} is not on the engine and cannot be pulled here; "
            "build it with `bash scripts/podman-docker.sh` or set MNEMOSCOPE_DOCKER_IMAGE"
        )
    except Exception as exc:
        return (
            f"no Docker engine reachable ({type(exc).__name__}); start dockerd, or run "
            "`bash scripts/podman-docker.sh` as root and export the DOCKER_HOST it prints"
        )
    finally:
        client.close()
    return None


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The image Docker tests run (skips, or fails under MNEMOSCOPE_REQUIRE_DOCKER=1)."""
    reason = _docker_reason()
    if reason:
        if REQUIRE_DOCKER:
            pytest.fail(reason + " (MNEMOSCOPE_REQUIRE_DOCKER=1 forbids skipping)")
        pytest.skip(reason)
    return DOCKER_IMAGE
