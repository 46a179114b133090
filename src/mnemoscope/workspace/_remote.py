"""What the Docker and E2B backends share: the file helper copied into a remote machine.

Both copy the files of ``_fsops.helper_files()`` to :data:`HELPER_DIR` in the container or
sandbox and run each file operation as one process there, ``python3 _fsops.py once
REQUEST``. A request longer than the backend's :attr:`RemoteHelperBackendBase.inline_limit`
does not fit on a command line: it travels as a file, ``once @path``, which the helper
deletes once read. A backend subclass says how to make directories, copy a file in and
run the helper; a workspace subclass says how to reach or create the machine.
"""

from __future__ import annotations

import asyncio
import secrets
from abc import abstractmethod
from typing import Any, ClassVar

from mnemoscope.workspace import _fsops
from mnemoscope.workspace._base import (
    BackendBase,
    WorkspaceBase,
    WorkspaceError,
    helper_answer,
    helper_request,
)

HELPER_DIR = "/tmp/.mnemoscope"
HELPER_PATH = HELPER_DIR + "/_fsops.py"


class RemoteHelperBackendBase(BackendBase):
    """A backend that runs the ``_fsops`` helper once per operation on a remote machine.

    Attributes:
        inline_limit: the longest request passed on the command line, in characters.
        where: the machine, as error messages name it (``"the container"``).
        python: the Python interpreter there.
    """

    inline_limit: ClassVar[int]
    where: ClassVar[str]

    def __init__(self, workdir: str, python: str) -> None:
        super().__init__(workdir)
        self.python = python

    @abstractmethod
    async def _make_dirs(self, *paths: str) -> None:
        """Create ``paths`` (and their parents) on the machine."""

    @abstractmethod
    async def _upload(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` on the machine (``mode`` where it can be set)."""

    @abstractmethod
    async def _run_helper(self, arg: str) -> tuple[int, str | bytes, str]:
        """Run ``python HELPER_PATH once arg``; its exit code, stdout and stderr."""

    async def install_helper(self) -> None:
        await self._make_dirs(HELPER_DIR, self.cwd)
        files = await asyncio.to_thread(_fsops.helper_files)
        for name, source in files.items():
            await self._upload(f"{HELPER_DIR}/{name}", source)

    async def _call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        req = helper_request(op, args)
        if len(req) <= self.inline_limit:
            arg = req
        else:
            arg_path = f"{HELPER_DIR}/req-{secrets.token_hex(8)}.json"
            await self._upload(arg_path, req.encode(), 0o600)
            arg = "@" + arg_path
        code, out, err = await self._run_helper(arg)
        if code != 0 or not out:
            raise WorkspaceError(
                f"the file helper failed in {self.where} (exit {code}): {err[-2000:]}",
                "unavailable",
            )
        return helper_answer(out)


class RemoteWorkspaceBase(WorkspaceBase):
    """A workspace on a remote machine that :meth:`initialize` creates or attaches to.

    Subclasses implement :meth:`_start`; :meth:`initialize` then installs the helper and
    checks that it answers before the workspace hands out its backend.
    """

    def __init__(self, workdir: str) -> None:
        super().__init__()
        self._workdir = workdir

    @property
    def workdir(self) -> str:
        return self._workdir

    @abstractmethod
    async def _start(self) -> RemoteHelperBackendBase:
        """Reach or create the machine, and return a backend on it."""

    async def initialize(self) -> None:
        if self._backend is not None:
            return
        backend = await self._start()
        await backend.install_helper()
        await backend._call("ping", {})
        self._backend = backend
