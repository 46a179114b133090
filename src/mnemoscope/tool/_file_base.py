"""What the file tools share: the backend, path resolution, permission roots, read tracking.

The tools themselves are in ``_file_tools`` (Read, Write, Edit) and ``_search_tools``
(Glob, Grep).

Safety: with a permission context, relative paths (and a missing Glob/Grep ``path``)
resolve against ``PermissionContext.cwd``, for the permission check and the operation
alike. Every call passes :meth:`PermissionContext.call_roots` (the working directories
plus what an allow rule grants to this call) to the backend, which refuses to touch
anything whose real location is outside them (unless the mode is ``BYPASS`` or the tool
is called without a permission context). Glob and Grep drop every path the engine would
refuse (deny rules, secret locations, outside the roots) and say how many. Overwriting
or editing an existing file requires that this agent read it and that it has not changed
since (tracked in ``ToolContext.state["file_reads"]`` by version token; code outside the
tools records or looks up reads with :func:`record_read` and :func:`read_version`).

A Write or Edit is one backend operation: the version recorded at the Read is passed as
``expected_version`` and checked under the file lock (no separate stat, no second read).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from mnemoscope.errors import UserError
from mnemoscope.permission import PermissionMode
from mnemoscope.tool._base import PathAccess, ToolBase, ToolContext, ToolResult
from mnemoscope.workspace import (
    ABSENT,
    BackendBase,
    FileChangedError,
    LocalBackend,
    WorkspaceError,
    WriteResult,
)

if TYPE_CHECKING:
    from mnemoscope.permission import PermissionDecision

READ_MAX_BYTES = 256 * 1024
"""A whole-file Read above this size is refused (use offset/limit)."""
READ_HARD_MAX_BYTES = 32 * 1024 * 1024
"""No Read, even partial, loads more than this."""
READ_DEFAULT_LINES = 2000
MAX_LINE_CHARS = 2000
STATE_KEY = "file_reads"
"""Key of the read-before-write records in the tool state (``agent.state.tool_state``)."""


def _read_key(backend: BackendBase, path: str) -> str:
    return f"{backend.key}:{path}"


def record_read(tool_state: dict[str, Any], backend: BackendBase, path: str, version: str) -> None:
    """Record that the agent has seen ``path`` at ``version``, as if it had Read it.

    Write and Edit then accept to replace the file as long as it is still at that version
    (checked under the file lock). A middleware that shows a file to the model (e.g. the
    agentic memory's index in the system prompt) uses this so the model can edit it
    without a redundant Read.

    Args:
        tool_state: the agent's tool state (``agent.state.tool_state``, which tools see
            as ``ToolContext.state``).
        backend: the backend the file lives in; records are per file namespace
            (``backend.key``), so tools on another backend do not see them.
        path: absolute path of the file; the real path (symlinks resolved) is best, as
            tools look up both the path the model gives and the real path.
        version: the exact version token of what was shown (from ``read_file`` or
            ``stat()``).

    Raises:
        UserError: ``version`` is a weak token from ``stat(hash=False)`` or ``list``.
    """
    from mnemoscope.workspace import is_weak_version

    if version != ABSENT and is_weak_version(version):
        raise UserError(
            f"record_read: version must be an exact version token (from read_file or stat()), "
            f"got the weak token {version!r} from stat(hash=False) or list()"
        )
    tool_state.setdefault(STATE_KEY, {})[_read_key(backend, path)] = version


def read_version(tool_state: dict[str, Any], backend: BackendBase, path: str) -> str | None:
    """The version at which the agent last read (or wrote) ``path``, or ``None``."""
    reads = tool_state.get(STATE_KEY)
    return None if not reads else reads.get(_read_key(backend, path))


class _FileTool(ToolBase):
    """Shared plumbing: backend, roots, path handling, read tracking."""

    def __init__(self, backend: BackendBase | None = None) -> None:
        self.backend = backend if backend is not None else LocalBackend()

    def _abs(self, path: str, ctx: ToolContext | None = None) -> str:
        """Absolute path for the check and the operation: relative paths resolve against
        the permission context's ``cwd`` when there is one (else the backend's)."""
        pc = ctx.permission_context if ctx is not None else None
        if pc is None or path.startswith("/") or path == "~" or path.startswith("~/"):
            return self.backend.abspath(path)
        return os.path.join(os.path.abspath(pc.cwd), path)

    def _cwd(self, ctx: ToolContext | None) -> str:
        pc = ctx.permission_context if ctx is not None else None
        return self.backend.cwd if pc is None else os.path.abspath(pc.cwd)

    def _paths(self, tool_input: BaseModel, ctx: ToolContext | None) -> list[PathAccess]:
        """The paths a call touches, made absolute as :meth:`call` will use them."""
        raise NotImplementedError

    def permission_paths(
        self, tool_input: BaseModel, ctx: ToolContext | None = None
    ) -> list[PathAccess]:
        """The paths as :meth:`call` and :meth:`check_permissions` resolve them: relative
        ones against ``ctx.permission_context.cwd`` when given (else the backend's cwd)."""
        return self._paths(tool_input, ctx)

    async def check_permissions(
        self, tool_input: BaseModel, ctx: ToolContext
    ) -> PermissionDecision | None:
        """The engine's decision on the paths as :meth:`call` resolves them (relative
        paths against the permission context's ``cwd``)."""
        pc = ctx.permission_context
        if pc is None:
            return None
        return pc.decide(
            self.name,
            is_read_only=self.is_read_only,
            auto_allow=self.auto_allow,
            paths=[(pa.path, pa.access) for pa in self._paths(tool_input, ctx)],
        )

    def _roots(self, ctx: ToolContext, paths: list[PathAccess]) -> list[str] | None:
        """What the backend confines this call to (``None``: unconfined)."""
        pc = ctx.permission_context
        if pc is None or pc.mode == PermissionMode.BYPASS:
            return None
        roots = pc.call_roots(self.name, [(pa.path, pa.access) for pa in paths])
        return None if roots is None else [str(r) for r in roots]

    def _path_filter(self, ctx: ToolContext, base: str) -> Callable[[str], bool] | None:
        """For Glob/Grep: whether a returned path may be shown (``None``: no filter).

        A path is kept when the engine allows reading it, or asks for it as it asks for
        the whole call (which was approved); a refusal, or an ask the call did not have,
        drops it.
        """
        pc = ctx.permission_context
        if pc is None:
            return None
        call = pc.decide(self.name, is_read_only=True, paths=[(base, "read")]).behavior
        seen: dict[str, bool] = {}

        def keep(path: str) -> bool:
            if path not in seen:
                got = pc.decide(self.name, is_read_only=True, paths=[(path, "read")]).behavior
                seen[path] = got == "allow" or (got == "ask" and call == "ask")
            return seen[path]

        return keep

    def _remember(self, ctx: ToolContext, version: str, *paths: str) -> None:
        """Record ``version`` under the path the model used and the real path."""
        for p in dict.fromkeys(paths):
            record_read(ctx.state, self.backend, p, version)

    def _error(self, exc: WorkspaceError, path: str = "") -> ToolResult:
        hint = {
            "not_found": " Check the path (Glob can find files).",
            "is_directory": " Use Glob to list a directory.",
            "read_only": "",
        }.get(exc.code, "")
        return ToolResult.error(f"{self.name} failed: {exc.message}{hint}")

    async def _replace(
        self,
        ctx: ToolContext,
        path: str,
        roots: list[str] | None,
        op: Callable[[str], Awaitable[WriteResult]],
        *,
        not_found: str | None = None,
    ) -> WriteResult | ToolResult:
        """Run ``op(expected_version)`` with the version this agent read ``path`` at.

        Not read under this path: expect the file to be absent (a creation). When it
        exists, look for a read under its real path (read through another path, e.g. a
        symlink) and retry once with that version; otherwise tell the model to Read first.
        A success is recorded as a read of the new version (so the model may change the
        file again); a failure comes back as the ``ToolResult`` the model sees
        (``not_found``, when given, replaces the message for a missing file).
        """
        changed = ToolResult.error(
            f"{path} has changed since you last read it (modified by someone else). "
            f"Read it again, then redo the {self.name}."
        )
        seen = read_version(ctx.state, self.backend, path)
        try:
            try:
                res = await op(seen if seen is not None else ABSENT)
            except FileChangedError:
                if seen is not None:
                    return changed
                st = await self.backend.stat(path, roots=roots, hash=False)  # its real path
                real_seen = read_version(ctx.state, self.backend, st.path) if st.exists else None
                if real_seen is None:
                    return ToolResult.error(
                        f"{path} already exists and has not been read yet. Call Read on it "
                        f"first, then call {self.name} again."
                    )
                try:
                    res = await op(real_seen)
                except FileChangedError:
                    return changed
        except WorkspaceError as exc:
            if not_found is not None and exc.code == "not_found":
                return ToolResult.error(not_found)
            return self._error(exc)
        self._remember(ctx, res.stat.version, path, res.stat.path)
        return res
