"""E2B workspace: files and commands in an E2B cloud sandbox (extra ``e2b``).

Example::

    from mnemoscope.workspace import E2BWorkspace

    async with E2BWorkspace() as ws:               # needs E2B_API_KEY
        backend = ws.get_backend()
        await backend.write_text(ws.workdir + "/notes.md", "hello\\n")

File operations run the shared helper (the files of ``_fsops.helper_files()``,
uploaded with ``files.write``)
through ``commands.run``, so writes are atomic and locked inside the sandbox as well.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from mnemoscope._optional import require
from mnemoscope.errors import UserError
from mnemoscope.workspace._base import ExecResult
from mnemoscope.workspace._remote import (
    HELPER_PATH,
    RemoteHelperBackendBase,
    RemoteWorkspaceBase,
)


class E2BBackend(RemoteHelperBackendBase):
    """Backend over an ``e2b.AsyncSandbox``.

    Args:
        sandbox: the sandbox.
        workdir: working directory inside the sandbox.
        python: Python interpreter inside the sandbox.
    """

    name = "e2b"
    inline_limit = 32_000
    where = "the E2B sandbox"

    def __init__(
        self, sandbox: Any, workdir: str = "/home/user/workspace", python: str = "python3"
    ):
        super().__init__(workdir, python)
        self.sandbox = sandbox

    @property
    def key(self) -> str:
        return f"e2b:{getattr(self.sandbox, 'sandbox_id', id(self.sandbox))}"

    async def _make_dirs(self, *paths: str) -> None:
        for path in paths:
            await self.sandbox.files.make_dir(path)

    async def _upload(self, path: str, data: bytes, mode: int = 0o644) -> None:
        await self.sandbox.files.write(path, data)  # E2B sets no mode

    async def _run(self, cmd: str, *, timeout: float, cwd: str | None = None) -> Any:  # noqa: ASYNC109 - exec(cmd, timeout) is the API
        e2b = require("e2b", extra="e2b", feature="E2BBackend")
        try:
            return await self.sandbox.commands.run(cmd, cwd=cwd, timeout=timeout)
        except e2b.CommandExitException as exc:
            return exc  # carries stdout, stderr, exit_code

    async def _run_helper(self, arg: str) -> tuple[int, str, str]:
        res = await self._run(f"{self.python} {HELPER_PATH} once {shlex.quote(arg)}", timeout=120)
        return res.exit_code, res.stdout, res.stderr

    async def exec(self, cmd: str, *, timeout: float = 60.0) -> ExecResult:  # noqa: ASYNC109 - exec(cmd, timeout) is the API
        e2b = require("e2b", extra="e2b", feature="E2BBackend")
        try:
            res = await self._run(cmd, timeout=timeout, cwd=self.cwd)
        except e2b.TimeoutException as exc:
            return ExecResult(exit_code=-9, stdout="", stderr=str(exc), timed_out=True)
        return ExecResult(exit_code=res.exit_code, stdout=res.stdout, stderr=res.stderr)


class E2BWorkspace(RemoteWorkspaceBase):
    """An E2B sandbox as a workspace.

    Args:
        template: sandbox template (default: E2B's base template).
        workdir: working directory inside the sandbox (created).
        api_key: E2B key (default: the ``E2B_API_KEY`` environment variable).
        timeout: sandbox lifetime in seconds.
        network: allow internet access from the sandbox (default False).
        sandbox: attach to an existing ``AsyncSandbox`` (not killed on close).
    """

    def __init__(
        self,
        template: str | None = None,
        workdir: str = "/home/user/workspace",
        *,
        api_key: str | None = None,
        timeout: int = 300,
        network: bool = False,
        sandbox: Any = None,
    ) -> None:
        super().__init__(workdir)
        self.template = template
        self.api_key = api_key
        self.timeout = timeout
        self.network = network
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None

    async def _start(self) -> RemoteHelperBackendBase:
        e2b = require("e2b", extra="e2b", feature="E2BWorkspace")
        if self._sandbox is None:
            api_key = self.api_key or os.environ.get("E2B_API_KEY")
            if not api_key:
                raise UserError(
                    "E2BWorkspace needs an API key: pass api_key=... or set E2B_API_KEY"
                )
            self._sandbox = await e2b.AsyncSandbox.create(
                template=self.template,
                timeout=self.timeout,
                allow_internet_access=self.network,
                api_key=api_key,
            )
        return E2BBackend(self._sandbox, self._workdir)

    async def close(self) -> None:
        self._backend = None
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None and self._owns_sandbox:
            await sandbox.kill()
