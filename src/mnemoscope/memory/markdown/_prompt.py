"""Texts of the agentic memory: the system-prompt section and the retrieval request."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from mnemoscope.memory.markdown._files import (
    INDEX_FILENAME,
    IndexView,
    MemoryFile,
    format_age,
)
from mnemoscope.message import escape_attribute, escape_injected

DEFAULT_MEMORY_INSTRUCTIONS = """\
# Long-term memory

You keep a long-term memory in Markdown files under `{memory_dir}`. It outlives this
conversation: whatever you save there, a later conversation with this user can use. The
directory and its index `{index_path}` already exist; use the Read, Write and Edit tools on
them directly.

## What is worth saving
Save what will still matter in a future conversation and cannot be found again elsewhere:
- **user**: who the user is: role, expertise, where they live, what they want from you.
- **feedback**: how the user wants you to work: corrections ("don't do X") and confirmed
  choices ("yes, keep doing that"). Save both kinds, or you will drift from what they liked.
- **project**: decisions, goals, deadlines and constraints of ongoing work that the files or
  history do not record. Write dates as absolute dates ("2026-03-05", not "Thursday").
- **reference**: where to find things outside this workspace (a tracker, a dashboard, a doc).

When the user asks you to remember something, save it now. When they ask you to forget
something, delete or edit the memory and its index line.

## What not to save
- Anything the workspace itself records (code, file layout, history, existing docs).
- Details that only matter for the task at hand, or intermediate results.
- Secrets (passwords, keys, tokens) and sensitive personal data the user did not ask you to keep.
- A second copy of something already saved: update the existing memory instead.

## How to save (two steps, in this order)
1. Write the memory to its own file in `{memory_dir}`, named after its topic in
   snake_case (e.g. `user_profile.md`, `feedback_answer_style.md`):

   ```markdown
   ---
   name: <short title>
   description: <one line saying WHEN to open this file; see below>
   type: <user | feedback | project | reference>
   ---

   <the memory>
   ```

   For feedback and project memories, state the rule or the fact first, then a
   `**Why:**` line (the reason given, so edge cases can be judged later) and a
   `**How to apply:**` line (the situations where it applies).
2. Add one line for it to `{index_path}`:
   `- [<title>](<file name>) — <the description, shortened>`. Use Edit to append it after
   the last line, or Write when the index is still empty. The index holds only these
   lines, never memory content.

Keep the frontmatter true to the content when you update a memory. If a tool reports
that a memory file changed since you read it, Read it again and redo your change.

## Descriptions are retrieval triggers
Future conversations decide from the description alone whether to open a file. Say when it
is needed, not what it is about:
- weak: `Notes about answer style`
- strong: `Read before choosing the language or length of an answer: the user's answer style`

## Using memories
Open a memory when its index line fits the request, and always when the user asks you to
recall or check something. Memories can be out of date: if what you observe now
contradicts one, trust the present and fix the memory. If the user asks you not to use
memory, answer as if the index were empty.
"""
"""Default instructions; ``{memory_dir}`` and ``{index_path}`` are filled in."""

DEFAULT_RETRIEVAL_INSTRUCTIONS = """\
You pick which long-term memory files will help an assistant answer a user's message.
You are given the message and a manifest: one line per memory file with its file name,
type, age and description. Return the file names (exactly as listed) of the memories that
are clearly useful for this message, most useful first, at most {max_selected}. Choose
only from the manifest. When none is clearly useful, return an empty list.
"""


class MemorySelection(BaseModel):
    """Memory files relevant to the user's message."""

    selected_files: list[str] = Field(
        default_factory=list,
        description="File names from the manifest, most useful first.",
    )


def render_index_section(
    view: IndexView,
    *,
    index_path: str,
    omitted_names_max: int = 20,
    invalid: Sequence[MemoryFile] = (),
    invalid_max: int = 10,
    size: int = 0,
    read_bytes: int = 0,
    long_lines: int = 0,
    max_bytes: int = 0,
    max_line_chars: int = 0,
) -> str:
    """The ``## MEMORY.md`` part of the system prompt: the bounded index and its notes.

    ``size``/``read_bytes`` (the file's size and how much of it was read) and
    ``long_lines`` (lines cut at ``max_line_chars``) add a note on what the read left out.
    """
    parts = [f"## {INDEX_FILENAME} (the index, at {index_path})"]
    if view.total_lines == 0:
        parts.append(
            "The index is empty: no memories saved yet."
            if read_bytes >= size
            else "(Nothing of the index is shown: see the note below.)"
        )
    else:
        parts.append(escape_injected(view.text))
    if read_bytes < size or long_lines:
        notes = []
        if read_bytes < size:
            notes.append(
                f"[{INDEX_FILENAME} is {size} bytes, over the {max_bytes} byte read limit: "
                f"only its first {read_bytes} bytes were read; the rest is not shown.]"
            )
        if long_lines:
            notes.append(
                f"[{long_lines} line(s) of {INDEX_FILENAME} are longer than {max_line_chars} "
                "characters and were cut; index lines should be one short entry each.]"
            )
        notes.append(
            f"The index is too large to be shown whole: Read {index_path} (in parts) before "
            "editing it, and shrink it to one short line per memory."
        )
        parts.append("\n".join(notes))
    if view.truncated:
        budget = "line" if view.cut_by == "lines" else "token"
        first = view.shown_lines + 1
        lines = [
            f"[Index truncated by the {budget} budget: lines {first}-{view.total_lines} of "
            f"{view.total_lines} are not shown above.]"
        ]
        if view.omitted_count:
            names = escape_injected(
                ", ".join(e.target for e in view.omitted[:omitted_names_max]), one_line=True
            )
            more = view.omitted_count - min(len(view.omitted), omitted_names_max)
            lines.append(
                f"Entries left out ({view.omitted_count}): {names}"
                + (f", and {more} more" if more > 0 else "")
                + "."
            )
        lines.append(
            f"Read {index_path} from line {first} to see them, and consider merging or "
            "removing stale memories so the index fits."
        )
        parts.append("\n".join(lines))
    if invalid:
        lines = [
            "[Memory files with invalid frontmatter (left out of automatic retrieval; fix them):"
        ]
        for mf in invalid[:invalid_max]:
            lines.append(escape_injected(f"- {mf.filename}: {'; '.join(mf.errors)}", one_line=True))
        if len(invalid) > invalid_max:
            lines.append(f"- and {len(invalid) - invalid_max} more")
        parts.append("\n".join(lines) + "]")
    return "\n\n".join(parts)


def render_manifest(files: Sequence[MemoryFile], now: float | None = None) -> str:
    """One line per file: ``- [type] file.md (saved 3 days ago): description``."""
    return "\n".join(
        escape_injected(
            f"- [{mf.type or '?'}] {mf.filename} (saved {format_age(mf.mtime, now)}): "
            f"{mf.description or ''}",
            one_line=True,
        )
        for mf in files
    )


def render_hint(files: Sequence[tuple[MemoryFile, str]], now: float | None = None) -> str:
    """The hint text holding the retrieved memories' contents."""
    parts = [
        "Long-term memories that may be relevant to this message (retrieved automatically; "
        "they are already shown here, no need to Read them):"
    ]
    for mf, content in files:
        # the file's text cannot close its <memory> nor the hint's wrapper
        parts.append(
            f'<memory file="{escape_attribute(mf.path)}" saved="{format_age(mf.mtime, now)}">\n'
            f"{escape_injected(content.strip())}\n</memory>"
        )
    return "\n\n".join(parts)
