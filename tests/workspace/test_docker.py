"""The Docker backend for real (podman's Docker-compatible API here): the container is the
boundary, so these check the boundary itself; the shared suites (backend contract, file tools,
escape attempts, the seed's sandbox example) also run over Docker through their fixtures."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mnemoscope.workspace import DockerBackend, DockerWorkspace


@pytest.fixture
async def docker_ws(docker_image: str) -> AsyncIterator[DockerWorkspace]:
    ws = DockerWorkspace(image=docker_image)
    await ws.initialize()
    try:
        yield ws
    finally:
        await ws.close()


def _backend(ws: DockerWorkspace) -> DockerBackend:
    backend = ws.get_backend()
    assert isinstance(backend, DockerBackend)
    return backend


async def test_container_runs_with_no_capabilities_no_network_and_no_new_privileges(
    docker_ws: DockerWorkspace,
) -> None:
    backend = _backend(docker_ws)
    status = await backend.exec("grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status")
    fields = dict(line.split(":\t") for line in status.stdout.strip().splitlines())
    assert int(fields["CapEff"], 16) == 0
    assert int(fields["CapBnd"], 16) == 0
    assert fields["NoNewPrivs"] == "1"
    for cmd in (
        "mount -o remount,rw /",
        "mount -t tmpfs none /mnt",
        "mknod /tmp/null2 c 1 3",
        "chown 65534 /tmp/.mnemoscope",
    ):
        result = await backend.exec(cmd)
        assert result.exit_code != 0, f"{cmd!r} succeeded inside the container"
    net = await backend.exec("cat /proc/net/dev")
    interfaces = [line.split(":")[0].strip() for line in net.stdout.splitlines()[2:]]
    assert interfaces == ["lo"]
    attrs = backend.container.attrs["HostConfig"]
    assert not attrs.get("Privileged")


async def test_run_kwargs_override_the_secure_defaults(docker_image: str) -> None:
    ws = DockerWorkspace(image=docker_image, run_kwargs={"cap_drop": [], "cap_add": ["CHOWN"]})
    await ws.initialize()
    try:
        result = await _backend(ws).exec("chown 65534 /tmp/.mnemoscope")
        assert result.exit_code == 0, result.stderr
    finally:
        await ws.close()


def _digest(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


async def test_writes_inside_the_container_never_reach_the_host(
    docker_ws: DockerWorkspace, tmp_path: Path
) -> None:
    backend = _backend(docker_ws)
    host_files = [Path("/etc/passwd"), Path("/etc/hostname"), tmp_path / "marker"]
    (tmp_path / "marker").write_text("host\n")
    before = _digest(host_files)
    # everything a hostile model could ask for, through the backend and through a shell
    await backend.write_text(f"{backend.cwd}/notes.md", "inside\n")
    for cmd in (
        "echo pwned >> /etc/passwd",
        "echo pwned > /etc/hostname",
        f"mkdir -p {tmp_path} && echo pwned > {tmp_path}/marker",
    ):
        await backend.exec(cmd)
    assert _digest(host_files) == before


async def test_concurrent_edits_in_one_container_lose_nothing(docker_ws: DockerWorkspace) -> None:
    """Each call is its own helper process in the container; the helper's lock serialises them."""
    backend = _backend(docker_ws)
    path = f"{backend.cwd}/MEMORY.md"
    await backend.write_text(path, " ".join(f"[{w}-{k}]" for w in range(4) for k in range(6)))

    async def worker(w: int) -> None:
        for k in range(6):
            await backend.edit(path, f"[{w}-{k}]", f"[{w}-{k} ok]")

    await asyncio.wait_for(asyncio.gather(*(worker(w) for w in range(4))), timeout=240)
    assert (await backend.read_text(path)).count(" ok]") == 24


async def test_closing_removes_the_container(docker_image: str) -> None:
    ws = DockerWorkspace(image=docker_image)
    await ws.initialize()
    container = _backend(ws).container
    client = ws._client
    container_id = container.id
    await ws.close()
    import docker

    check = docker.from_env(timeout=10)
    try:
        with pytest.raises(docker.errors.NotFound):
            check.containers.get(container_id)
    finally:
        check.close()
    assert client is not None
