"""Built-in file tools: ``Read``, ``Write``, ``Edit``, ``Glob`` and ``Grep`` over a backend.

Example::

    from mnemoscope.tool import Edit, Read, Toolkit, Write

    toolkit = Toolkit(tools=[Read(), Write(), Edit()])           # LocalBackend
    toolkit = Toolkit(tools=[Read(backend=backend), Write(backend=backend)])

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
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mnemoscope.errors import UserError
from mnemoscope.permission import PermissionMode
from mnemoscope.tool._base import PathAccess, ToolBase, ToolContext, ToolResult
from mnemoscope.workspace import (
    ABSENT,
    BackendBase,
    FileChangedError,
    FsError,
    LocalBackend,
    WorkspaceError,
    WriteResult,
    decode_text,
    split_lines,
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
    ) -> WriteResult | ToolResult:
        """Run ``op(expected_version)`` with the version this agent read ``path`` at.

        Not read under this path: expect the file to be absent (a creation). When it
        exists, look for a read under its real path (read through another path, e.g. a
        symlink) and retry once with that version; otherwise tell the model to Read first.
        """
        seen = read_version(ctx.state, self.backend, path)
        try:
            return await op(seen if seen is not None else ABSENT)
        except FileChangedError:
            if seen is not None:
                return ToolResult.error(
                    f"{path} has changed since you last read it (modified by someone else). "
                    f"Read it again, then redo the {self.name}."
                )
        st = await self.backend.stat(path, roots=roots, hash=False)  # only its real path
        real_seen = read_version(ctx.state, self.backend, st.path) if st.exists else None
        if real_seen is None:
            return ToolResult.error(
                f"{path} already exists and has not been read yet. Call Read on it first, "
                f"then call {self.name} again."
            )
        try:
            return await op(real_seen)
        except FileChangedError:
            return ToolResult.error(
                f"{path} has changed since you last read it (modified by someone else). "
                f"Read it again, then redo the {self.name}."
            )


# ------------------------------------------------------------------------- Read
class ReadInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_path: str = Field(description="Absolute path of the file to read.")
    offset: int | None = Field(
        None, ge=1, description="Line number to start from (1-based). Omit to start at 1."
    )
    limit: int | None = Field(
        None, ge=1, description=f"Number of lines to read (default {READ_DEFAULT_LINES})."
    )


class Read(_FileTool):
    """Read a text file with numbered lines (``cat -n`` style).

    Args:
        backend: where the file lives (default: :class:`LocalBackend`).
        max_bytes: a whole-file read of a larger file is refused with a message telling
            the model to use ``offset``/``limit``.
    """

    name = "Read"
    description = (
        "Read a text file. Returns lines prefixed with their line number (cat -n style). "
        f"Reads up to {READ_DEFAULT_LINES} lines from the start by default; use offset and "
        "limit for long files. Lines longer than 2000 characters are cut. You must Read a "
        "file before you Write over it or Edit it."
    )
    Input = ReadInput
    is_read_only = True

    def __init__(self, backend: BackendBase | None = None, *, max_bytes: int = READ_MAX_BYTES):
        super().__init__(backend)
        self.max_bytes = max_bytes

    def _paths(self, tool_input: BaseModel, ctx: ToolContext | None) -> list[PathAccess]:
        assert isinstance(tool_input, ReadInput)
        return [PathAccess(self._abs(tool_input.file_path, ctx), "read")]

    async def call(self, tool_input: ReadInput, ctx: ToolContext) -> ToolResult:
        paths = self._paths(tool_input, ctx)
        path = paths[0].path
        partial = tool_input.offset is not None or tool_input.limit is not None
        cap = READ_HARD_MAX_BYTES if partial else self.max_bytes
        roots = self._roots(ctx, paths)
        try:
            content = await self.backend.read_file(path, roots=roots, max_bytes=cap)
        except WorkspaceError as exc:
            if exc.code == "too_large":
                return ToolResult.error(
                    f"{path} is larger than {cap // 1024} KiB; call Read with offset and limit "
                    "to read part of it (or Grep to find the lines you need)."
                )
            return self._error(exc)
        try:
            text, _ = decode_text(content.data)
        except FsError:
            return ToolResult.error(
                f"{path} is a binary file ({content.stat.size} bytes); Read shows text only."
            )
        self._remember(ctx, content.stat.version, path, content.stat.path)
        if not text:
            return ToolResult(output=f"({path} is empty)", metadata={"lines": 0})
        lines = split_lines(text)  # \n, \r\n, \r only: as Edit and Grep count lines
        start = (tool_input.offset or 1) - 1
        count = tool_input.limit or READ_DEFAULT_LINES
        if start >= len(lines):
            return ToolResult.error(
                f"offset {start + 1} is past the end of {path} ({len(lines)} lines)."
            )
        chunk = lines[start : start + count]
        out = []
        for n, line in enumerate(chunk, start + 1):
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f"... [{len(line) - MAX_LINE_CHARS} chars cut]"
            out.append(f"{n:>6}\t{line}")
        end = start + len(chunk)
        if end < len(lines):
            out.append(
                f"... ({len(lines) - end} more lines; call Read with offset={end + 1} to continue)"
            )
        return ToolResult(
            output="\n".join(out),
            metadata={"lines": len(lines), "version": content.stat.version},
        )


# ------------------------------------------------------------------------ Write
class WriteInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_path: str = Field(description="Absolute path of the file to write.")
    content: str = Field(description="The full new content of the file.")


class Write(_FileTool):
    """Create a file or replace its whole content (atomically).

    An existing file must have been Read first and be unchanged since; its encoding and
    CRLF line endings are kept.
    """

    name = "Write"
    description = (
        "Write a file (creates it, with missing parent directories, or replaces its whole "
        "content). To overwrite an existing file you must Read it first. Prefer Edit for "
        "changes to part of a file."
    )
    Input = WriteInput

    def _paths(self, tool_input: BaseModel, ctx: ToolContext | None) -> list[PathAccess]:
        assert isinstance(tool_input, WriteInput)
        return [PathAccess(self._abs(tool_input.file_path, ctx), "write")]

    async def call(self, tool_input: WriteInput, ctx: ToolContext) -> ToolResult:
        paths = self._paths(tool_input, ctx)
        path = paths[0].path
        roots = self._roots(ctx, paths)

        def write(version: str) -> Awaitable[WriteResult]:
            return self.backend.write_text(
                path, tool_input.content, roots=roots, expected_version=version
            )

        try:
            res = await self._replace(ctx, path, roots, write)
        except WorkspaceError as exc:
            return self._error(exc)
        if isinstance(res, ToolResult):
            return res
        self._remember(ctx, res.stat.version, path, res.stat.path)
        lines = tool_input.content.count("\n") + (0 if tool_input.content.endswith("\n") else 1)
        verb = "Created" if res.created else "Updated"
        return ToolResult(
            output=f"{verb} {path} ({lines} lines, {res.stat.size} bytes).",
            metadata={"created": res.created, "version": res.stat.version},
        )


# ------------------------------------------------------------------------- Edit
class EditInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_path: str = Field(description="Absolute path of the file to edit.")
    old_string: str = Field(description="The exact text to replace (must occur exactly once).")
    new_string: str = Field(description="The text to put instead (must differ).")
    replace_all: bool = Field(False, description="Replace every occurrence of old_string.")


class Edit(_FileTool):
    """Replace an exact string in a file, atomically and under the file lock.

    ``old_string`` must occur exactly once unless ``replace_all``; the file must have been
    Read first and be unchanged since. CRLF files stay CRLF (``\\n`` in the strings
    matches ``\\r\\n``). An empty ``old_string`` creates a missing (or fills an empty) file.
    """

    name = "Edit"
    description = (
        "Replace old_string with new_string in a file. old_string must match the file "
        "exactly (whitespace included) and occur exactly once, unless replace_all is true. "
        "Read the file first; copy old_string from the Read output without the line-number "
        "prefix."
    )
    Input = EditInput

    def _paths(self, tool_input: BaseModel, ctx: ToolContext | None) -> list[PathAccess]:
        assert isinstance(tool_input, EditInput)
        return [PathAccess(self._abs(tool_input.file_path, ctx), "write")]

    async def call(self, tool_input: EditInput, ctx: ToolContext) -> ToolResult:
        paths = self._paths(tool_input, ctx)
        path = paths[0].path
        if tool_input.old_string == tool_input.new_string:
            return ToolResult.error("Edit failed: old_string and new_string are identical.")
        roots = self._roots(ctx, paths)

        def edit(version: str) -> Awaitable[WriteResult]:
            return self.backend.edit(
                path,
                tool_input.old_string,
                tool_input.new_string,
                replace_all=tool_input.replace_all,
                roots=roots,
                expected_version=version,
            )

        try:
            res = await self._replace(ctx, path, roots, edit)
        except WorkspaceError as exc:
            if exc.code == "not_found" and tool_input.old_string:
                return ToolResult.error(
                    f"Edit failed: {path} does not exist. Use Write to create it "
                    "(or Edit with an empty old_string)."
                )
            return self._error(exc)
        if isinstance(res, ToolResult):
            return res
        self._remember(ctx, res.stat.version, path, res.stat.path)
        many = "s" if res.replacements != 1 else ""
        return ToolResult(
            output=(
                f"Edited {path}: {res.replacements} replacement{many} (first at line {res.line})."
            ),
            metadata={"replacements": res.replacements, "version": res.stat.version},
        )


# ------------------------------------------------------------------------- Glob
class GlobInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(
        description='Glob pattern, e.g. "**/*.md" or "notes/*.txt" ("**" crosses directories).'
    )
    path: str | None = Field(
        None, description="Directory to search in (default: the working directory)."
    )


def _split_glob(pattern: str, base: str) -> tuple[str, str]:
    """Move the literal leading directories of an absolute pattern into the base."""
    if not pattern.startswith("/"):
        return base, pattern
    parts = pattern.split("/")
    i = 1
    while i < len(parts) - 1 and not any(c in parts[i] for c in "*?[{"):
        i += 1
    return "/".join(parts[:i]) or "/", "/".join(parts[i:])


class Glob(_FileTool):
    """List files whose path matches a glob pattern (sorted, at most ``limit``)."""

    name = "Glob"
    description = (
        "Find files by glob pattern (e.g. '**/*.md'). Returns matching file paths, one a "
        "line. Use Grep to search inside files."
    )
    Input = GlobInput
    is_read_only = True

    def __init__(self, backend: BackendBase | None = None, *, limit: int = 500) -> None:
        super().__init__(backend)
        self.limit = limit

    def _target(self, tool_input: GlobInput, ctx: ToolContext | None) -> tuple[str, str]:
        return _split_glob(tool_input.pattern, self._abs(tool_input.path or self._cwd(ctx), ctx))

    def _paths(self, tool_input: BaseModel, ctx: ToolContext | None) -> list[PathAccess]:
        assert isinstance(tool_input, GlobInput)
        return [PathAccess(self._target(tool_input, ctx)[0], "read")]

    async def call(self, tool_input: GlobInput, ctx: ToolContext) -> ToolResult:
        base, pattern = self._target(tool_input, ctx)
        roots = self._roots(ctx, [PathAccess(base, "read")])
        keep = self._path_filter(ctx, base)
        limit = self.limit
        for _ in range(_REFILL_ROUNDS):
            try:
                found, truncated = await self.backend.glob(pattern, base, roots=roots, limit=limit)
            except WorkspaceError as exc:
                return self._error(exc)
            paths = found if keep is None else [p for p in found if keep(p)]
            left_out = len(found) - len(paths)
            # denied paths took room under the limit: ask for more
            if not (truncated and left_out and len(paths) < self.limit):
                break
            limit *= 4
        if len(paths) > self.limit:
            paths, truncated = paths[: self.limit], True
        note = _left_out_note(left_out, "path")
        if not paths:
            return ToolResult(
                output=f"No files match {pattern!r} in {base}.{note}",
                metadata={"count": 0, "truncated": truncated, "left_out": left_out},
            )
        out = "\n".join(paths)
        if truncated:
            out += f"\n... (more than {self.limit} matches; use a narrower pattern)"
        if note:
            out += "\n" + note.strip()
        return ToolResult(
            output=out,
            metadata={"count": len(paths), "truncated": truncated, "left_out": left_out},
        )


_REFILL_ROUNDS = 3
"""Glob/Grep ask the backend again (with a 4x larger limit) at most this many times in all
when paths the permission rules drop took room under the limit."""


def _skipped_note(skipped: list[tuple[str, str]], count: int) -> str:
    if not count:
        return ""
    shown = "; ".join(f"{p} ({why})" for p, why in skipped[:_SKIPPED_SHOWN])
    more = count - min(len(skipped), _SKIPPED_SHOWN)
    rest = f"; and {more} more" if more > 0 else ""
    many = "s" if count != 1 else ""
    return f" ({count} file{many} not searched: {shown}{rest}.)"


_SKIPPED_SHOWN = 10


def _left_out_note(count: int, what: str) -> str:
    if not count:
        return ""
    many = "s" if count != 1 else ""
    return f" ({count} {what}{many} left out: the permission rules do not allow reading them.)"


# ------------------------------------------------------------------------- Grep
class GrepInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(description="Regular expression (Python syntax) to search for.")
    path: str | None = Field(
        None, description="File or directory to search (default: the working directory)."
    )
    glob: str | None = Field(
        None, description='Only search files matching this glob, e.g. "*.md" or "**/*.py".'
    )
    case_insensitive: bool = Field(False, description="Ignore case.")
    output_mode: Literal["content", "files_with_matches", "count"] = Field(
        "content",
        description="content: matching lines as path:line:text; files_with_matches: paths; "
        "count: matches per file.",
    )
    head_limit: int = Field(200, ge=1, le=5000, description="Maximum matches to return.")


class Grep(_FileTool):
    """Search file contents with a regular expression."""

    name = "Grep"
    description = (
        "Search file contents with a regular expression. Returns path:line:text lines "
        "(or file paths, or counts, per output_mode). Binary files are skipped."
    )
    Input = GrepInput
    is_read_only = True

    def _paths(self, tool_input: BaseModel, ctx: ToolContext | None) -> list[PathAccess]:
        assert isinstance(tool_input, GrepInput)
        return [PathAccess(self._abs(tool_input.path or self._cwd(ctx), ctx), "read")]

    async def call(self, tool_input: GrepInput, ctx: ToolContext) -> ToolResult:
        paths = self._paths(tool_input, ctx)
        path = paths[0].path
        roots = self._roots(ctx, paths)
        keep = self._path_filter(ctx, path)
        head_limit = tool_input.head_limit
        limit = head_limit
        for _ in range(_REFILL_ROUNDS):
            try:
                res = await self.backend.grep(
                    tool_input.pattern,
                    path,
                    roots=roots,
                    glob=tool_input.glob,
                    ignore_case=tool_input.case_insensitive,
                    limit=limit,
                )
            except WorkspaceError as exc:
                return self._error(exc)
            matches = res.matches if keep is None else [m for m in res.matches if keep(m.path)]
            dropped = {m.path for m in res.matches} - {m.path for m in matches}
            if not (res.truncated and dropped and len(matches) < head_limit):
                break
            limit *= 4
        truncated = res.truncated or len(matches) > head_limit
        matches = matches[:head_limit]
        # files the backend did not search: never name one the rules hide
        skipped = [(p, why) for p, why in res.skipped if keep is None or keep(p)]
        dropped |= {p for p, _ in res.skipped} - {p for p, _ in skipped}
        hidden = len(res.skipped) - len(skipped)
        not_searched = _skipped_note(skipped, max(0, res.files_skipped - hidden))
        note = _left_out_note(len(dropped), "file") + not_searched
        if not matches:
            return ToolResult(
                output=f"No matches for {tool_input.pattern!r} in {path} "
                f"({res.files_searched} files searched).{note}",
                metadata={"matches": 0, "truncated": truncated, "left_out": len(dropped)},
            )
        if tool_input.output_mode == "files_with_matches":
            lines = list(dict.fromkeys(m.path for m in matches))
        elif tool_input.output_mode == "count":
            counts: dict[str, int] = {}
            for m in matches:
                counts[m.path] = counts.get(m.path, 0) + 1
            lines = [f"{p}:{n}" for p, n in counts.items()]
        else:
            lines = [f"{m.path}:{m.line}:{m.text[:MAX_LINE_CHARS]}" for m in matches]
        if truncated:
            lines.append(f"... (stopped at {head_limit} matches; narrow the search)")
        if note:
            lines.append(note.strip())
        meta: dict[str, Any] = {
            "matches": len(matches),
            "truncated": truncated,
            "left_out": len(dropped),
        }
        return ToolResult(output="\n".join(lines), metadata=meta)


__all__ = ["STATE_KEY", "Edit", "Glob", "Grep", "Read", "Write", "read_version", "record_read"]
