"""``Glob`` and ``Grep``: find files by name or content, showing only what the rules allow.

Both drop every path the permission engine would refuse (deny rules, secret locations,
outside the roots) and say how many; when dropped paths took room under the limit they
ask the backend again with a larger one.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mnemoscope.tool._base import PathAccess, ToolContext, ToolResult
from mnemoscope.tool._file_base import MAX_LINE_CHARS, _FileTool
from mnemoscope.workspace import BackendBase, WorkspaceError


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


__all__ = ["Glob", "Grep"]
