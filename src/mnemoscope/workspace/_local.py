"""The local backend (the default) and the local workspace.

Example::

    from mnemoscope.workspace import LocalBackend, LocalWorkspace

    backend = LocalBackend()                       # files of this machine, cwd = os.getcwd()
    await backend.write_text("/tmp/demo/a.md", "hello\\n")

    async with LocalWorkspace() as ws:             # a fresh temp directory, removed on close
        tools = await ws.list_tools()              # Read, Write, Edit, Glob, Grep
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
from typing import Any

from mnemoscope.workspace import _fsops, _grep_worker
from mnemoscope.workspace._base import BackendBase, ExecResult, WorkspaceBase, make_error
from mnemoscope.workspace._fsops_search import GREP_TIME_LIMIT


class LocalBackend(BackendBase):
    """Files and commands of the local machine.

    Args:
        cwd: directory that relative paths and commands start from (default: the
            process's current directory at construction).

    Writes are atomic (temp file, fsync, rename, directory fsync) and serialised across
    processes by ``flock`` on the parent directory; see :mod:`mnemoscope.workspace._fsops`.

    File operations run in a worker thread, except ``grep``: a regular expression can
    take exponential time and holds the GIL while it runs, so greps run in helper
    processes (``python -I -S _fsops.py serve``) that stop themselves at the time limit
    and are killed when the call is cancelled (see ``_grep_worker``).
    """

    name = "local"

    def __init__(self, cwd: str | None = None) -> None:
        super().__init__(os.path.abspath(cwd or os.getcwd()), os.path.expanduser("~"))

    @property
    def key(self) -> str:
        return "local"

    async def _call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        if op == "grep" and sys.executable:
            limit = args.get("time_limit")
            return await _grep_worker.call(
                op, args, timeout=GREP_TIME_LIMIT if limit is None else limit
            )
        try:
            return await asyncio.to_thread(_fsops.dispatch, op, args)
        except _fsops.FsError as exc:
            raise make_error(exc.code, exc.message) from None

    async def exec(self, cmd: str, *, timeout: float = 60.0) -> ExecResult:  # noqa: ASYNC109 - exec(cmd, timeout) is the API
        return await run_process(["/bin/sh", "-c", cmd], timeout=timeout, cwd=self.cwd)


async def run_process(
    argv: list[str],
    *,
    timeout: float,  # noqa: ASYNC109 - exec(cmd, timeout) is the API
    cwd: str | None = None,
    env: dict[str, str] | None = None,
) -> ExecResult:
    """Run ``argv`` in its own process group; kill the whole group on timeout."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except (TimeoutError, asyncio.CancelledError) as exc:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = await proc.communicate()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return ExecResult(
            exit_code=proc.returncode if proc.returncode is not None else -9,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace") + f"\n[killed after {timeout:g} s]",
            timed_out=True,
        )
    return ExecResult(
        exit_code=proc.returncode or 0,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
    )


class LocalWorkspace(WorkspaceBase):
    """A directory on this machine.

    Args:
        workdir: the directory (created if missing). Default: a new temporary directory,
            deleted by :meth:`close`.
    """

    def __init__(self, workdir: str | None = None) -> None:
        super().__init__()
        self._workdir = os.path.abspath(os.path.expanduser(workdir)) if workdir else None
        self._owns_dir = workdir is None

    @property
    def workdir(self) -> str:
        if self._workdir is None:
            raise make_error("invalid", "LocalWorkspace has no workdir before initialize()")
        return self._workdir

    async def initialize(self) -> None:
        if self._backend is not None:
            return
        if self._workdir is None:
            self._workdir = await asyncio.to_thread(tempfile.mkdtemp, prefix="mnemoscope-ws-")
        else:
            await asyncio.to_thread(os.makedirs, self._workdir, exist_ok=True)
        self._backend = LocalBackend(cwd=self._workdir)

    async def close(self) -> None:
        if self._backend is None:
            return
        self._backend = None
        if self._owns_dir and self._workdir:
            await asyncio.to_thread(shutil.rmtree, self._workdir, True)
            self._workdir = None
