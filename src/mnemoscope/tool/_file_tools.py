"""Built-in file tools: ``Read``, ``Write``, ``Edit``, ``Glob`` and ``Grep`` over a backend.

Example::

    from mnemoscope.tool import Edit, Read, Toolkit, Write, file_tools

    toolkit = Toolkit(tools=[Read(), Write(), Edit()])           # LocalBackend
    toolkit = Toolkit(tools=[Read(backend=backend), Write(backend=backend)])
    toolkit = Toolkit(tools=file_tools(backend))                 # all five

How they resolve paths, confine calls and track reads: see ``_file_base``. Glob and Grep
are in ``_search_tools``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from mnemoscope.tool._base import PathAccess, ToolBase, ToolContext, ToolResult
from mnemoscope.tool._file_base import (
    MAX_LINE_CHARS,
    READ_DEFAULT_LINES,
    READ_HARD_MAX_BYTES,
    READ_MAX_BYTES,
    STATE_KEY,
    _FileTool,
    read_version,
    record_read,
)
from mnemoscope.tool._search_tools import Glob, Grep
from mnemoscope.workspace import (
    BackendBase,
    FsError,
    LocalBackend,
    WorkspaceBase,
    WorkspaceError,
    WriteResult,
    decode_text,
    split_lines,
)


class _FileInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_path: str


class _OneFileTool(_FileTool):
    """A tool on the one file its input's ``file_path`` names (Read, Write, Edit)."""

    access: ClassVar[Literal["read", "write"]] = "read"

    def _paths(self, tool_input: BaseModel, ctx: ToolContext | None) -> list[PathAccess]:
        assert isinstance(tool_input, _FileInput)
        return [PathAccess(self._abs(tool_input.file_path, ctx), self.access)]

    def _file(self, tool_input: _FileInput, ctx: ToolContext) -> tuple[str, list[str] | None]:
        """The absolute path of the call's file and the roots the backend confines it to."""
        paths = self._paths(tool_input, ctx)
        return paths[0].path, self._roots(ctx, paths)


# ------------------------------------------------------------------------- Read
class ReadInput(_FileInput):
    file_path: str = Field(description="Absolute path of the file to read.")
    offset: int | None = Field(
        None, ge=1, description="Line number to start from (1-based). Omit to start at 1."
    )
    limit: int | None = Field(
        None, ge=1, description=f"Number of lines to read (default {READ_DEFAULT_LINES})."
    )


class Read(_OneFileTool):
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

    async def call(self, tool_input: ReadInput, ctx: ToolContext) -> ToolResult:
        path, roots = self._file(tool_input, ctx)
        partial = tool_input.offset is not None or tool_input.limit is not None
        cap = READ_HARD_MAX_BYTES if partial else self.max_bytes
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
class WriteInput(_FileInput):
    file_path: str = Field(description="Absolute path of the file to write.")
    content: str = Field(description="The full new content of the file.")


class Write(_OneFileTool):
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
    access = "write"

    async def call(self, tool_input: WriteInput, ctx: ToolContext) -> ToolResult:
        path, roots = self._file(tool_input, ctx)

        def write(version: str) -> Awaitable[WriteResult]:
            return self.backend.write_text(
                path, tool_input.content, roots=roots, expected_version=version
            )

        res = await self._replace(ctx, path, roots, write)
        if isinstance(res, ToolResult):
            return res
        lines = tool_input.content.count("\n") + (0 if tool_input.content.endswith("\n") else 1)
        verb = "Created" if res.created else "Updated"
        return ToolResult(
            output=f"{verb} {path} ({lines} lines, {res.stat.size} bytes).",
            metadata={"created": res.created, "version": res.stat.version},
        )


# ------------------------------------------------------------------------- Edit
class EditInput(_FileInput):
    file_path: str = Field(description="Absolute path of the file to edit.")
    old_string: str = Field(description="The exact text to replace (must occur exactly once).")
    new_string: str = Field(description="The text to put instead (must differ).")
    replace_all: bool = Field(False, description="Replace every occurrence of old_string.")


class Edit(_OneFileTool):
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
    access = "write"

    async def call(self, tool_input: EditInput, ctx: ToolContext) -> ToolResult:
        if tool_input.old_string == tool_input.new_string:
            return ToolResult.error("Edit failed: old_string and new_string are identical.")
        path, roots = self._file(tool_input, ctx)

        def edit(version: str) -> Awaitable[WriteResult]:
            return self.backend.edit(
                path,
                tool_input.old_string,
                tool_input.new_string,
                replace_all=tool_input.replace_all,
                roots=roots,
                expected_version=version,
            )

        missing = (
            f"Edit failed: {path} does not exist. Use Write to create it "
            "(or Edit with an empty old_string)."
        )
        res = await self._replace(
            ctx, path, roots, edit, not_found=missing if tool_input.old_string else None
        )
        if isinstance(res, ToolResult):
            return res
        many = "s" if res.replacements != 1 else ""
        return ToolResult(
            output=(
                f"Edited {path}: {res.replacements} replacement{many} (first at line {res.line})."
            ),
            metadata={"replacements": res.replacements, "version": res.stat.version},
        )


def file_tools(backend: BackendBase | None = None) -> list[ToolBase]:
    """``Read``, ``Write``, ``Edit``, ``Glob`` and ``Grep`` over one backend.

    This is what ``await workspace.list_tools()`` returns for the workspace's backend.

    Args:
        backend: where the files live (default: one :class:`LocalBackend` for all five,
            so a Write sees the Read of the same file).

    Returns:
        The five tools, in that order.
    """
    backend = backend if backend is not None else LocalBackend()
    return [
        Read(backend=backend),
        Write(backend=backend),
        Edit(backend=backend),
        Glob(backend=backend),
        Grep(backend=backend),
    ]


# The workspace layer sits below this one: it cannot name the file tools, so
# WorkspaceBase.list_tools builds them with the factory registered here.
WorkspaceBase.tools_factory = file_tools

__all__ = [
    "STATE_KEY",
    "Edit",
    "Glob",
    "Grep",
    "Read",
    "Write",
    "file_tools",
    "read_version",
    "record_read",
]
