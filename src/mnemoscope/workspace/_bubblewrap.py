"""A real local sandbox with Bubblewrap (``bwrap``, Debian package ``bubblewrap``).

Example::

    from mnemoscope.workspace import BubblewrapWorkspace

    async with BubblewrapWorkspace(workdir="/tmp/agent-work") as ws:
        backend = ws.get_backend()
        await backend.write_text(ws.workdir + "/notes.md", "hello\\n")
        print((await backend.exec("ls -l && curl -sI https://example.com")).stdout)  # no network

Inside the sandbox only ``workdir`` is writable (mounted at the same path as outside, so
paths agree with the permission engine); ``/usr`` and the Python runtime are read-only;
``/tmp`` is a private tmpfs; the home directory and the rest of the host are absent;
there is no network unless ``network=True``; all namespaces are unshared and the sandbox
dies with its parent. File operations run in one long-lived helper process inside the
sandbox (``_fsops.py serve`` with ``_fsops_search.py`` beside it, JSON lines over
stdin/stdout), so they are confined twice: by the mounts and by the ``roots`` checks of
``_fsops``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from mnemoscope.errors import UserError
from mnemoscope.workspace import _fsops
from mnemoscope.workspace._base import (
    BackendBase,
    ExecResult,
    WorkspaceBase,
    WorkspaceError,
    make_error,
)
from mnemoscope.workspace._local import run_process

HELPER_DIR = "/.mnemoscope"
"""Where the helper's files (``_fsops.py``, ``_fsops_search.py``) are mounted, read-only."""
HELPER_PATH = HELPER_DIR + "/_fsops.py"
"""The helper script inside the sandbox."""

_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
)
_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


def bwrap_args(
    workdir: str,
    *,
    bwrap: str = "bwrap",
    network: bool = False,
    ro_paths: Sequence[str] = (),
    rw_paths: Sequence[str] = (),
    python_prefix: str | None = None,
    env: dict[str, str] | None = None,
) -> list[str]:
    """The ``bwrap`` command line (without the command) for a sandbox around ``workdir``."""
    args = [bwrap, "--die-with-parent", "--new-session", "--unshare-all"]
    if network:
        args.append("--share-net")
    args += [
        "--clearenv",
        "--setenv",
        "PATH",
        _PATH,
        "--setenv",
        "HOME",
        workdir,
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
    ]
    for key, value in (env or {}).items():
        args += ["--setenv", key, value]
    args += ["--ro-bind", "/usr", "/usr"]
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in _ETC_FILES:
        args += ["--ro-bind-try", f, f]
    prefix = python_prefix or sys.base_prefix
    if not prefix.startswith("/usr/"):
        args += ["--ro-bind", prefix, prefix]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for name, host_path in _fsops.helper_paths().items():
        args += ["--ro-bind", host_path, f"{HELPER_DIR}/{name}"]
    for p in ro_paths:
        args += ["--ro-bind", p, p]
    for p in rw_paths:
        args += ["--bind", p, p]
    args += ["--bind", workdir, workdir, "--chdir", workdir]
    return args


class BubblewrapBackend(BackendBase):
    """Files and commands inside a Bubblewrap sandbox; create it with
    :class:`BubblewrapWorkspace` (or directly, then :meth:`start`)."""

    name = "bubblewrap"

    def __init__(
        self,
        workdir: str,
        *,
        bwrap: str = "bwrap",
        network: bool = False,
        ro_paths: Sequence[str] = (),
        rw_paths: Sequence[str] = (),
        python: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        # "~" in a tool path means the host home (hidden in the sandbox), so the
        # permission engine and the backend agree that it is outside
        super().__init__(workdir, os.path.expanduser("~"))
        self._python = os.path.realpath(python or sys.executable)
        prefix = (
            sys.base_prefix if python is None else os.path.dirname(os.path.dirname(self._python))
        )
        self._args = bwrap_args(
            workdir,
            bwrap=bwrap,
            network=network,
            ro_paths=ro_paths,
            rw_paths=rw_paths,
            python_prefix=prefix,
            env=env,
        )
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    @property
    def key(self) -> str:
        return f"bubblewrap:{self.cwd}"

    @property
    def command_prefix(self) -> list[str]:
        """The ``bwrap ...`` argv prefix; append a command to run it in the sandbox."""
        return list(self._args)

    async def start(self) -> None:
        """Start the helper process (done lazily by the first operation)."""
        async with self._lock:
            await self._ensure()

    async def _ensure(self) -> asyncio.subprocess.Process:
        if self._proc is not None and self._proc.returncode is None:
            return self._proc
        self._proc = await asyncio.create_subprocess_exec(
            *self._args,
            self._python,
            "-I",
            "-S",
            HELPER_PATH,
            "serve",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=1 << 30,
        )
        return self._proc

    async def _call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        line = json.dumps({"op": op, "args": _fsops.to_json(args)}).encode() + b"\n"
        async with self._lock:
            proc = await self._ensure()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(line)
                await proc.stdin.drain()
                answer = await proc.stdout.readline()
            except (BrokenPipeError, ConnectionResetError):
                answer = b""
            except asyncio.CancelledError:
                # the answer would be read by the next call: restart the helper instead
                await self._kill()
                raise
            if not answer:
                err = b""
                if proc.stderr is not None:
                    try:
                        err = await asyncio.wait_for(proc.stderr.read(4000), 1)
                    except TimeoutError:
                        pass
                await self._kill()
                raise WorkspaceError(
                    "the bubblewrap sandbox helper exited: "
                    + (err.decode("utf-8", "replace").strip() or "no output"),
                    "unavailable",
                )
        res = json.loads(answer)
        if not res["ok"]:
            raise make_error(res["code"], res["message"])
        return _fsops.from_json(res["result"])

    async def exec(self, cmd: str, *, timeout: float = 60.0) -> ExecResult:  # noqa: ASYNC109 - exec(cmd, timeout) is the API
        return await run_process([*self._args, "/bin/sh", "-c", cmd], timeout=timeout)

    async def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        try:
            proc.kill()
        except ProcessLookupError:
            pass
        await proc.wait()

    async def aclose(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 2)
        except TimeoutError:
            self._proc = proc
            await self._kill()


class BubblewrapWorkspace(WorkspaceBase):
    """A local sandbox: only ``workdir`` is writable, no network by default.

    Args:
        workdir: host directory mounted read-write at the same path (created if missing).
            Default: a new temporary directory, deleted by :meth:`close`.
        network: share the host network (default: no network at all).
        ro_paths: extra host paths mounted read-only at the same path.
        rw_paths: extra host paths mounted read-write (e.g. a shared memory directory).
        bwrap: the ``bwrap`` executable.
        python: Python interpreter for the file helper (default: this one).
        env: extra environment variables inside the sandbox.

    Raises:
        UserError: on :meth:`initialize` when ``bwrap`` is missing or cannot create a
            sandbox here (e.g. user namespaces disabled).
    """

    def __init__(
        self,
        workdir: str | None = None,
        *,
        network: bool = False,
        ro_paths: Sequence[str] = (),
        rw_paths: Sequence[str] = (),
        bwrap: str = "bwrap",
        python: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self._workdir = os.path.realpath(os.path.expanduser(workdir)) if workdir else None
        self._owns_dir = workdir is None
        self._opts: dict[str, Any] = dict(
            network=network,
            ro_paths=tuple(ro_paths),
            rw_paths=tuple(rw_paths),
            python=python,
            env=env,
        )
        self._bwrap = bwrap

    @property
    def workdir(self) -> str:
        if self._workdir is None:
            raise UserError("BubblewrapWorkspace.workdir is set by initialize(); await it first")
        return self._workdir

    async def initialize(self) -> None:
        if self._backend is not None:
            return
        bwrap = shutil.which(self._bwrap)
        if bwrap is None:
            raise UserError(
                f"BubblewrapWorkspace needs the {self._bwrap!r} executable: install it with "
                "'apt-get install bubblewrap' (Debian/Ubuntu) or pass bwrap='/path/to/bwrap'"
            )
        if self._workdir is None:
            tmp = await asyncio.to_thread(tempfile.mkdtemp, prefix="mnemoscope-bwrap-")
            self._workdir = await asyncio.to_thread(os.path.realpath, tmp)
        else:
            await asyncio.to_thread(os.makedirs, self._workdir, exist_ok=True)
        backend = BubblewrapBackend(self._workdir, bwrap=bwrap, **self._opts)
        try:
            await backend._call("ping", {})
        except WorkspaceError as exc:
            await backend.aclose()
            raise UserError(
                f"bwrap could not start a sandbox here ({exc}); check that user namespaces "
                "are allowed (sysctl kernel.unprivileged_userns_clone=1) or run as root"
            ) from None
        self._backend = backend

    async def close(self) -> None:
        backend, self._backend = self._backend, None
        if backend is None:
            return
        await backend.aclose()
        if self._owns_dir and self._workdir:
            await asyncio.to_thread(shutil.rmtree, self._workdir, True)
            self._workdir = None
