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
dies with its parent. Everything inside runs as a non-root uid (the caller's, or
:data:`ROOT_CALLER_UID` when the caller is root) in a user namespace that maps it back to
the caller, with every capability dropped and (where ``bwrap`` supports it) no further
user namespaces, so even a sandbox started by root cannot remount, ``chown`` or
``mknod``; ``bwrap`` itself starts with only ``PATH`` in its environment, so the host's
variables (API keys) are not readable through ``/proc/1/environ`` inside. File
operations run in one long-lived helper process inside the sandbox (``_fsops.py serve``
with ``_fsops_search.py`` beside it, JSON lines over stdin/stdout), so they are confined
twice: by the mounts and by the ``roots`` checks of ``_fsops``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
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
    helper_answer,
    helper_request,
)
from mnemoscope.workspace._local import run_process

HELPER_DIR = "/.mnemoscope"
"""Where the helper's files (``_fsops.helper_paths()``) are mounted, read-only."""
HELPER_PATH = HELPER_DIR + "/_fsops.py"
"""The helper script inside the sandbox."""
ROOT_CALLER_UID = 1000
"""The uid and gid inside the sandbox when the caller is root (root itself never runs inside)."""

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
# bwrap's own environment: with --unshare-pid the sandbox's pid 1 is a bwrap process whose
# /proc/1/environ every command inside can read, so the host's variables must not reach it
_BWRAP_ENV = {"PATH": _PATH}


def sandbox_ids() -> tuple[int, int]:
    """The ``(uid, gid)`` commands run as inside the sandbox.

    The caller's own ids, or :data:`ROOT_CALLER_UID` for root (and for gid 0), so nothing
    inside is root. The user namespace maps them back to the caller: files the sandbox
    creates belong to the caller on the host.
    """
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        return ROOT_CALLER_UID, ROOT_CALLER_UID
    return uid, gid if gid != 0 else ROOT_CALLER_UID


@functools.lru_cache(maxsize=8)
def _bwrap_help(bwrap: str) -> str:
    # run once per executable: options such as --disable-userns are newer than others
    try:
        proc = subprocess.run(
            [bwrap, "--help"], capture_output=True, env=_BWRAP_ENV, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return (proc.stdout + proc.stderr).decode("utf-8", "replace")


def bwrap_supports(bwrap: str, option: str) -> bool:
    """Whether ``bwrap --help`` lists ``option`` (probed once per executable, cached)."""
    return option in _bwrap_help(bwrap).split()


def bwrap_args(
    workdir: str,
    *,
    bwrap: str,
    network: bool,
    ro_paths: Sequence[str],
    rw_paths: Sequence[str],
    python_prefix: str,
    env: dict[str, str] | None,
    uid: int,
    gid: int,
) -> list[str]:
    """The ``bwrap`` command line (without the command) for a sandbox around ``workdir``,
    from the settings of a :class:`BubblewrapBackend` (whose constructor has the defaults).

    User namespaces are disabled inside when this ``bwrap`` supports ``--disable-userns``.
    """
    args = [bwrap, "--die-with-parent", "--new-session", "--unshare-all", "--unshare-user"]
    args += ["--uid", str(uid), "--gid", str(gid), "--cap-drop", "ALL"]
    if bwrap_supports(bwrap, "--disable-userns"):
        args.append("--disable-userns")
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
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    if not _under(python_prefix, "/usr"):
        # after the /tmp tmpfs, which would hide a Python installed under /tmp
        args += ["--ro-bind", python_prefix, python_prefix]
    for name, host_path in _fsops.helper_paths().items():
        args += ["--ro-bind", host_path, f"{HELPER_DIR}/{name}"]
    for p in ro_paths:
        args += ["--ro-bind", p, p]
    for p in rw_paths:
        args += ["--bind", p, p]
    args += ["--bind", workdir, workdir, "--chdir", workdir]
    return args


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _default_python() -> tuple[str, str]:
    """This interpreter and its installation prefix, as the sandbox can mount them."""
    prefix = sys.base_prefix
    python = os.path.realpath(sys.executable)
    if not (_under(python, "/usr") or _under(python, prefix)):
        # a venv made with --copies: its python is outside the mounted prefix, the base
        # installation's is not
        base = os.path.join(prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
        if os.path.isfile(base):
            python = os.path.realpath(base)
    return python, prefix


class BubblewrapBackend(BackendBase):
    """Files and commands inside a Bubblewrap sandbox; create it with
    :class:`BubblewrapWorkspace` (or directly, then :meth:`start`).

    Commands run as :attr:`uid`/:attr:`gid` (never root) with no capabilities.
    """

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
        if python is None:
            self._python, self._prefix = _default_python()
        else:
            self._python = os.path.realpath(python)
            self._prefix = os.path.dirname(os.path.dirname(self._python))
        self.uid, self.gid = sandbox_ids()
        # bwrap starts with PATH only (see _BWRAP_ENV): resolve it with ours
        self._args = bwrap_args(
            workdir,
            bwrap=shutil.which(bwrap) or bwrap,
            network=network,
            ro_paths=ro_paths,
            rw_paths=rw_paths,
            python_prefix=self._prefix,
            env=env,
            uid=self.uid,
            gid=self.gid,
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

    @property
    def python(self) -> str:
        """The interpreter that runs the file helper inside the sandbox."""
        return self._python

    def python_problem(self) -> str | None:
        """Why the helper's Python cannot run in the sandbox, or None (checked on the host)."""
        python, prefix = self._python, self._prefix
        if not (_under(python, "/usr") or _under(python, prefix)):
            return (
                f"the file helper's Python {python} is outside what the sandbox mounts "
                f"(/usr and its prefix {prefix}); pass python= an interpreter under /usr "
                "(e.g. python='/usr/bin/python3') or one inside its own installation prefix"
            )
        if not os.access(python, os.X_OK) or not os.access(prefix, os.R_OK | os.X_OK):
            return (
                f"the file helper's Python {python} (prefix {prefix}) cannot be mounted in "
                f"the sandbox: uid {os.getuid()} cannot read or run it; pass python= an "
                "interpreter this user can run (e.g. python='/usr/bin/python3') or make "
                f"{prefix} readable by this user"
            )
        return None

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
            env=dict(_BWRAP_ENV),
            limit=1 << 30,
        )
        return self._proc

    async def _call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        line = helper_request(op, args).encode() + b"\n"
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
        return helper_answer(answer)

    async def exec(self, cmd: str, *, timeout: float = 60.0) -> ExecResult:  # noqa: ASYNC109 - exec(cmd, timeout) is the API
        return await run_process(
            [*self._args, "/bin/sh", "-c", cmd], timeout=timeout, env=dict(_BWRAP_ENV)
        )

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

    Commands and the file helper run as a non-root uid (the caller's; ``1000`` when the
    caller is root) with no capabilities, mapped back to the caller on the host: files
    the sandbox creates belong to the caller, and it can change only what the caller
    could change without root's permission override.

    Raises:
        UserError: on :meth:`initialize` when ``bwrap`` is missing or cannot create a
            sandbox here (e.g. user namespaces disabled), when ``workdir`` is not
            writable by that uid, or when the helper's Python cannot be mounted or run.
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
        try:
            self._backend = await self._start(bwrap, self._workdir)
        except BaseException:
            if self._owns_dir:  # a failed start leaves no temporary directory behind
                await asyncio.to_thread(shutil.rmtree, self._workdir, True)
                self._workdir = None
            raise

    async def _start(self, bwrap: str, workdir: str) -> BubblewrapBackend:
        await asyncio.to_thread(_bwrap_help, bwrap)  # the one probe, off the loop
        backend = BubblewrapBackend(workdir, bwrap=bwrap, **self._opts)
        problem = await asyncio.to_thread(backend.python_problem)
        if problem is not None:
            raise UserError(f"BubblewrapWorkspace: {problem}")
        await self._check_workdir(backend)
        try:
            await backend._call("ping", {})
        except WorkspaceError as exc:
            await backend.aclose()
            raise UserError(
                f"BubblewrapWorkspace's file helper did not start in the sandbox with "
                f"{backend.python} ({exc}); if that Python cannot run there (it needs 3.10+ "
                "and its standard library inside its prefix), pass python= another "
                "interpreter, e.g. python='/usr/bin/python3'"
            ) from None
        return backend

    async def _check_workdir(self, backend: BubblewrapBackend) -> None:
        # asked inside the sandbox: its uid has no capabilities, so as root on the host
        # os.access() would answer for a different process than the one that writes
        workdir = self.workdir
        probe = 'if [ -w "$1" ] && [ -x "$1" ]; then echo writable; else echo read-only; fi'
        res = await run_process(
            [*backend.command_prefix, "/bin/sh", "-c", probe, "sh", workdir],
            timeout=30,
            env=dict(_BWRAP_ENV),
        )
        answer = res.stdout.strip()
        if answer == "writable":
            return
        if answer == "read-only":
            uid, gid = os.getuid(), os.getgid()
            raise UserError(
                f"BubblewrapWorkspace workdir {workdir} is not writable inside the sandbox, "
                f"which runs as uid {backend.uid} with no capabilities (uid {uid} on the host; "
                "root's permission override does not apply inside): make it yours "
                f"(chown -R {uid}:{gid} {workdir}) or pass a workdir that uid {uid} owns"
            )
        detail = (res.stderr.strip() or f"exit code {res.exit_code}")[:500]
        if "Can't find source path" in detail:
            raise UserError(
                f"bwrap cannot mount a path into the sandbox ({detail}): uid {os.getuid()} "
                "must be able to reach every mounted path (workdir, ro_paths, rw_paths, the "
                "Python prefix); fix its permissions or pass paths this user can read"
            )
        raise UserError(
            f"bwrap could not start a sandbox here ({detail}); it needs user namespaces, "
            "also when run as root: allow them (sysctl user.max_user_namespaces > 0, "
            "kernel.unprivileged_userns_clone=1 on older Debian/Ubuntu kernels; in a "
            "container, a seccomp profile that permits CLONE_NEWUSER)"
        )

    async def close(self) -> None:
        backend, self._backend = self._backend, None
        if backend is None:
            return
        await backend.aclose()
        if self._owns_dir and self._workdir:
            await asyncio.to_thread(shutil.rmtree, self._workdir, True)
            self._workdir = None
