"""Docker workspace: files and commands inside a container (extra ``docker``).

Example::

    from mnemoscope.workspace import DockerWorkspace

    async with DockerWorkspace(image="python:3.12-slim") as ws:
        backend = ws.get_backend()
        await backend.write_text(ws.workdir + "/notes.md", "hello\\n")
        tools = await ws.list_tools()          # Read, Write, Edit, Glob, Grep in the container

File operations run the same helper as every other backend (the files of
``_fsops.helper_files()``, copied into the container with ``put_archive``) through
``exec_run``, so writes are atomic and locked inside the container too; large requests
travel as files via ``put_archive``.
The image needs ``python3`` 3.10 or newer (the helper script uses ``X | Y`` unions).

The container is the boundary. By default it has no network (``network=True`` gives it one),
no Linux capabilities (``cap_drop=["ALL"]``: root inside cannot mount, mknod, chown or trace),
``no-new-privileges`` (setuid binaries gain nothing) and a process limit; ``run_kwargs``
overrides any of these. Tested here with podman's Docker-compatible API
(``bash scripts/podman-docker.sh``), not with Docker Engine itself.
"""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
import time
from typing import Any

from mnemoscope._optional import require
from mnemoscope.workspace._base import ExecResult, WorkspaceError
from mnemoscope.workspace._remote import (
    HELPER_PATH,
    RemoteHelperBackendBase,
    RemoteWorkspaceBase,
)

# what every container we create gets unless run_kwargs says otherwise
SECURE_RUN_DEFAULTS: dict[str, Any] = {
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "pids_limit": 512,
}


def _tar_one(name: str, data: bytes, mode: int = 0o644) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DockerBackend(RemoteHelperBackendBase):
    """Backend over a running ``docker.models.containers.Container``.

    Args:
        container: the container (the docker SDK object).
        workdir: working directory inside the container.
        python: Python interpreter inside the container.
    """

    name = "docker"
    inline_limit = 64_000
    where = "the container"

    def __init__(self, container: Any, workdir: str = "/workspace", python: str = "python3"):
        super().__init__(workdir, python)
        self.container = container

    @property
    def key(self) -> str:
        return f"docker:{getattr(self.container, 'id', id(self.container))}"

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Copy bytes into the container with ``put_archive`` (not atomic; use write_*)."""
        ok = await asyncio.to_thread(
            self.container.put_archive,
            os.path.dirname(path),
            _tar_one(os.path.basename(path), data, mode),
        )
        if not ok:
            raise WorkspaceError(f"docker put_archive into {path} failed", "io")

    async def get_file(self, path: str) -> bytes:
        """Copy one file out of the container with ``get_archive``."""
        stream, _ = await asyncio.to_thread(self.container.get_archive, path)
        raw = b"".join(await asyncio.to_thread(list, stream))
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            member = tar.next()
            f = tar.extractfile(member) if member else None
            if f is None:
                raise WorkspaceError(f"{path} is not a regular file", "denied")
            return f.read()

    async def _make_dirs(self, *paths: str) -> None:
        await asyncio.to_thread(self.container.exec_run, ["mkdir", "-p", *paths])

    async def _upload(self, path: str, data: bytes, mode: int = 0o644) -> None:
        await self.put_file(path, data, mode)

    async def _run_helper(self, arg: str) -> tuple[int, bytes, str]:
        code, (out, err) = await asyncio.to_thread(
            self.container.exec_run, [self.python, HELPER_PATH, "once", arg], demux=True
        )
        return code, out or b"", (err or b"").decode("utf-8", "replace")

    async def exec(self, cmd: str, *, timeout: float = 60.0) -> ExecResult:  # noqa: ASYNC109 - exec(cmd, timeout) is the API
        # exec_run has no timeout: coreutils' timeout kills the command inside
        argv = ["timeout", "-s", "KILL", f"{timeout:g}", "/bin/sh", "-c", cmd]
        code, (out, err) = await asyncio.to_thread(
            self.container.exec_run, argv, workdir=self.cwd, demux=True
        )
        timed_out = code in (124, 137)
        return ExecResult(
            exit_code=code,
            stdout=(out or b"").decode("utf-8", "replace"),
            stderr=(err or b"").decode("utf-8", "replace"),
            timed_out=timed_out,
        )


class DockerWorkspace(RemoteWorkspaceBase):
    """A container as a workspace.

    Args:
        image: image to run (needs ``python3`` for the file helper).
        workdir: working directory inside the container (created).
        network: give the container network access (default: ``network_mode="none"``).
        client: a ``docker.DockerClient`` (default ``docker.from_env()``, closed on close).
        container: attach to this running container instead of creating one (not removed
            on close).
        run_kwargs: extra arguments for ``client.containers.run`` (mem_limit, volumes...);
            they override ``SECURE_RUN_DEFAULTS`` (no capabilities, no-new-privileges,
            512 processes).
    """

    def __init__(
        self,
        image: str = "python:3.12-slim",
        workdir: str = "/workspace",
        *,
        network: bool = False,
        client: Any = None,
        container: Any = None,
        run_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(workdir)
        self.image = image
        self.network = network
        self._client = client
        self._owns_client = client is None
        self._container = container
        self._owns_container = container is None
        self.run_kwargs = dict(run_kwargs or {})

    async def _start(self) -> RemoteHelperBackendBase:
        docker = require("docker", extra="docker", feature="DockerWorkspace")
        if self._client is None:
            try:
                self._client = await asyncio.to_thread(docker.from_env)
                await asyncio.to_thread(self._client.ping)
            except docker.errors.DockerException as exc:
                self._client = None
                raise WorkspaceError(
                    f"cannot reach a Docker engine ({exc}); start dockerd or set DOCKER_HOST",
                    "unavailable",
                ) from None
        if self._container is None:
            kwargs: dict[str, Any] = {
                "detach": True,
                "working_dir": self._workdir,
                **SECURE_RUN_DEFAULTS,
            }
            if not self.network:
                kwargs["network_mode"] = "none"
            kwargs.update(self.run_kwargs)
            self._container = await asyncio.to_thread(
                self._client.containers.run, self.image, ["sleep", "infinity"], **kwargs
            )
        return DockerBackend(self._container, self._workdir)

    async def close(self) -> None:
        self._backend = None
        container, self._container = self._container, None
        if container is not None and self._owns_container:
            await asyncio.to_thread(container.remove, force=True)
        if self._client is not None and self._owns_client:
            await asyncio.to_thread(self._client.close)
            self._client = None
