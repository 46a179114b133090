"""Agentic memory on disk: memory files with YAML frontmatter and the ``MEMORY.md`` index.

Pure functions (no I/O) shared by the middleware, the ``mnemoscope memory`` CLI and the
benchmark. A memory file looks like::

    ---
    name: User profile
    description: When the answer depends on where the user lives or how they like answers
    type: user
    ---

    Lives in Hangzhou; prefers concise answers in Chinese.

and ``MEMORY.md`` holds one line per memory: ``- [User profile](user_profile.md) — hook``.
"""

from __future__ import annotations

import functools
import posixpath
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

INDEX_FILENAME = "MEMORY.md"
"""The index file inside the memory directory."""

MEMORY_DIRNAME = "Memory"
"""The memory directory inside the workdir."""

MEMORY_TYPES = ("user", "feedback", "project", "reference")
"""Allowed values of the ``type`` field."""

REQUIRED_FIELDS = ("name", "description", "type")

_FRONTMATTER_RE = re.compile(
    r"\A\ufeff?\s*---[ \t]*\r?\n(?P<fm>.*?)(?:\r?\n)?^---[ \t]*(?:\r?\n|\Z)", re.S | re.M
)
_LOOSE_FIELD_RE = re.compile(r"^(?P<key>[A-Za-z_][\w-]*)\s*:\s*(?P<value>.*)$")
_INDEX_LINE_RE = re.compile(
    r"^\s*[-*+]\s*\[(?P<title>[^\]]*)\]\((?P<target>[^)\s]+)\)\s*(?:[\u2014\u2013:-]+\s*(?P<hook>.*))?$"
)


# --------------------------------------------------------------------------- files
@dataclass
class MemoryFile:
    """One memory file, parsed.

    Attributes:
        filename: path relative to the memory directory, with ``/`` separators.
        path: the file's path in the backend.
        name / description / type: frontmatter fields (``None`` when missing).
        body: the Markdown after the frontmatter.
        mtime: modification time (Unix seconds), ``None`` when the backend has none.
        size: size in bytes.
        errors: why the file is invalid (it is then left out of retrieval).
        warnings: problems that do not stop retrieval (e.g. YAML that needed a lenient parse).
    """

    filename: str
    path: str
    name: str | None = None
    description: str | None = None
    type: str | None = None
    body: str = ""
    mtime: float | None = None
    size: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors

    def age(self, now: float | None = None) -> str:
        """Human age: ``today``, ``yesterday``, ``12 days ago`` or ``unknown``."""
        return format_age(self.mtime, now)


def format_age(mtime: float | None, now: float | None = None) -> str:
    if mtime is None:
        return "unknown"
    days = max(0, int(((now or time.time()) - mtime) // 86_400))
    return "today" if days == 0 else "yesterday" if days == 1 else f"{days} days ago"


def parse_frontmatter(text: str) -> tuple[dict[str, Any], str, list[str], list[str]]:
    """Split a memory file into ``(fields, body, errors, warnings)``.

    YAML is parsed with ``yaml.safe_load``. Models often write an unquoted colon in a
    description (``description: When asked: ...``), which is not valid YAML; such a block
    is re-read as plain ``key: value`` lines and a warning is recorded instead of an error.
    """
    m = _FRONTMATTER_RE.match(text)
    if m is None:
        return {}, text, ["no frontmatter: the file must start with a '---' line"], []
    raw = m.group("fm")
    body = text[m.end() :].lstrip("\r\n")
    warnings: list[str] = []
    plain = _plain_fields(raw)
    if plain is not None:
        return plain, body, [], []
    try:
        loaded = yaml.load(raw, Loader=_Loader) if raw.strip() else {}
    except yaml.YAMLError as exc:
        loose = _loose_fields(raw)
        if not loose:
            first = str(exc).splitlines()[0]
            return {}, body, [f"frontmatter is not valid YAML: {first}"], []
        warnings.append("frontmatter is not valid YAML (read line by line; quote values with ':')")
        loaded = loose
    if not isinstance(loaded, dict):
        return {}, body, ["frontmatter must be a mapping of 'key: value' lines"], warnings
    return loaded, body, [], warnings


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PLAIN_VALUE_RE = re.compile(r"[A-Za-z0-9(][^:#'\"\[\]{}&*!|>%@`]*")


def _plain_fields(raw: str) -> dict[str, Any] | None:
    """``key: value`` lines whose values are plain YAML strings, parsed without YAML.

    Returns ``None`` when any line needs the real parser (quotes, colons, lists...). For
    the lines it accepts the result equals YAML's, except that YAML would turn values
    like ``yes`` or ``12`` into booleans or numbers; here they stay text.
    """
    out: dict[str, Any] = {}
    for line in raw.splitlines():
        if not line.strip():
            continue
        m = _LOOSE_FIELD_RE.match(line)
        if m is None or m.group("key") in out:
            return None
        value = m.group("value").strip()
        if not _PLAIN_VALUE_RE.fullmatch(value):
            return None
        out[m.group("key")] = value
    return out


def _loose_fields(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in raw.splitlines():
        m = _LOOSE_FIELD_RE.match(line.strip())
        if m:
            out[m.group("key")] = m.group("value").strip().strip("'\"")
    return out


def parse_memory_file(
    filename: str, path: str, text: str, *, mtime: float | None = None, size: int | None = None
) -> MemoryFile:
    """Parse and validate one memory file (see :class:`MemoryFile`)."""
    fields, body, errors, warnings = parse_frontmatter(text)
    mf = MemoryFile(
        filename=filename,
        path=path,
        body=body,
        mtime=mtime,
        size=len(text.encode("utf-8")) if size is None else size,
        errors=errors,
        warnings=warnings,
    )
    if errors:
        return mf
    for key in REQUIRED_FIELDS:
        value = fields.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            mf.errors.append(f"missing field {key!r}")
            continue
        if not isinstance(value, str | int | float):
            mf.errors.append(f"field {key!r} must be a single line of text")
            continue
        setattr(mf, key, " ".join(str(value).split()))
    if mf.type is not None and mf.type not in MEMORY_TYPES:
        mf.errors.append(f"type {mf.type!r} is not one of {', '.join(MEMORY_TYPES)}")
    return mf


def render_memory_file(name: str, description: str, memory_type: str, body: str) -> str:
    """The text of a memory file (values quoted so any character round-trips)."""
    fm = yaml.safe_dump(
        {"name": name, "description": description, "type": memory_type},
        sort_keys=False,
        allow_unicode=True,
        width=10_000,
    )
    return f"---\n{fm}---\n\n{body.strip()}\n"


# --------------------------------------------------------------------------- index
@dataclass(frozen=True)
class IndexEntry:
    """One ``- [Title](file.md) — hook`` line of ``MEMORY.md``."""

    lineno: int
    title: str
    target: str
    """The linked file, normalised relative to the memory directory."""
    hook: str
    raw: str


def normalize_target(target: str) -> str:
    target = target.strip().split("#", 1)[0]
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    return posixpath.normpath(target).lstrip("/") if target else target


LINE_CUT_MARK = " [... line cut]"
"""Appended to an index line cut at the line length limit."""


def cut_index_text(data: bytes, size: int, *, max_line_chars: int) -> tuple[str, int, int]:
    """Decode the first bytes of ``MEMORY.md`` into bounded text.

    Args:
        data: the bytes read (a prefix of the file, or all of it).
        size: the file's size; when ``data`` is shorter, a partial last line is dropped
            (unless it is the only one: a one-line file keeps its start).
        max_line_chars: longer lines are cut to this many characters and marked with
            :data:`LINE_CUT_MARK`.

    Returns:
        ``(text, bytes used, lines cut)``.
    """
    if len(data) < size:
        end = data.rfind(b"\n")
        if end >= 0:
            data = data[: end + 1]
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    cut = 0
    for i, line in enumerate(lines):
        if len(line) > max_line_chars:
            lines[i] = line[:max_line_chars] + LINE_CUT_MARK
            cut += 1
    return ("\n".join(lines) if cut else text), len(data), cut


def parse_index(text: str) -> list[IndexEntry]:
    """Entries of ``MEMORY.md`` (lines that are not entries are skipped)."""
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        m = _INDEX_LINE_RE.match(line)
        if m:
            out.append(
                IndexEntry(
                    lineno=i,
                    title=m.group("title").strip(),
                    target=normalize_target(m.group("target")),
                    hook=(m.group("hook") or "").strip(),
                    raw=line,
                )
            )
    return out


def index_line(mf: MemoryFile) -> str:
    """The index line for a memory file: ``- [name](file.md) — description``."""
    title = (mf.name or posixpath.splitext(posixpath.basename(mf.filename))[0]).replace("]", ")")
    hook = mf.description or (mf.body.strip().splitlines() or [""])[0][:150]
    return f"- [{title}]({mf.filename}) — {hook}".rstrip(" —")


@dataclass
class IndexView:
    """The part of ``MEMORY.md`` that fits the prompt budget.

    Attributes:
        text: the lines shown, joined.
        total_lines: lines in the whole index.
        shown_lines: lines shown (the first ``shown_lines``).
        omitted: the first entries left out (lines after ``shown_lines``).
        omitted_count: how many entries were left out in all.
        tokens: tokens of ``text``.
        cut_by: ``"lines"``, ``"tokens"`` or ``None`` when everything fits.
    """

    text: str
    total_lines: int
    shown_lines: int
    omitted: list[IndexEntry]
    omitted_count: int
    tokens: int
    cut_by: str | None

    @property
    def truncated(self) -> bool:
        return self.cut_by is not None


def bound_index(
    text: str,
    *,
    max_lines: int,
    max_tokens: int,
    count_tokens: Callable[[str], int],
    omitted_max: int = 20,
) -> IndexView:
    """Keep the leading lines of the index that fit both budgets (whole lines only).

    Tokens are counted on the joined lines (one call when the first ``max_lines`` lines
    fit, a binary search over line counts otherwise). ``omitted`` holds the first
    ``omitted_max`` entries left out; ``omitted_count`` counts them all.
    """
    lines = text.rstrip("\n").splitlines() if text.strip() else []
    head = lines[:max_lines]
    cut_by: str | None = "lines" if len(lines) > max_lines else None
    tokens = count_tokens("\n".join(head)) if head else 0
    if tokens > max_tokens:
        cut_by = "tokens"
        lo, hi = 0, len(head) - 1  # the answer is the largest n in [lo, hi] that fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count_tokens("\n".join(head[:mid])) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        head = head[:lo]
        tokens = count_tokens("\n".join(head)) if head else 0
    rest = lines[len(head) :]
    omitted: list[IndexEntry] = []
    omitted_count = 0
    for i, line in enumerate(rest, start=len(head) + 1):
        if not _looks_like_entry(line):
            continue
        omitted_count += 1
        if len(omitted) < omitted_max:
            m = _INDEX_LINE_RE.match(line)
            if m is None:
                omitted_count -= 1
                continue
            omitted.append(
                IndexEntry(
                    i,
                    m.group("title").strip(),
                    normalize_target(m.group("target")),
                    (m.group("hook") or "").strip(),
                    line,
                )
            )
    return IndexView(
        text="\n".join(head),
        total_lines=len(lines),
        shown_lines=len(head),
        omitted=omitted,
        omitted_count=omitted_count,
        tokens=tokens,
        cut_by=cut_by,
    )


def _looks_like_entry(line: str) -> bool:
    stripped = line.lstrip()
    return stripped[:1] in ("-", "*", "+") and "](" in stripped


def add_index_lines(index_text: str, lines: Iterable[str]) -> str:
    """``index_text`` with ``lines`` appended (one per line, a final newline kept)."""
    body = index_text.rstrip("\n")
    extra = "\n".join(lines)
    if not extra:
        return index_text
    return f"{body}\n{extra}\n" if body else f"{extra}\n"


# ------------------------------------------------ what the store reads and scans
@dataclass(frozen=True)
class IndexSnapshot:
    """``MEMORY.md`` at one moment.

    Attributes:
        text: its content, bounded: at most ``MAX_INDEX_BYTES`` bytes (whole lines),
            each line cut at ``MAX_INDEX_LINE_CHARS`` characters.
        cheap_version: the weak version ``mtime_ns:size:i<inode>`` (what
            :meth:`MemoryStore.index_version` returns).
        version: the workspace's exact version token (``expected_version`` of a write)
            when the whole file was read; the weak version otherwise, which no write
            accepts, so a partly read index is never written back.
        real_path: the file's real path.
        size: the file's size in bytes.
        read_bytes: how many of them ``text`` holds (``size`` when nothing was left out).
        long_lines: how many lines were cut at ``MAX_INDEX_LINE_CHARS`` characters.
    """

    text: str
    cheap_version: str
    version: str
    real_path: str
    size: int = 0
    read_bytes: int = 0
    long_lines: int = 0

    @property
    def bytes_cut(self) -> bool:
        """True when the end of the file was not read."""
        return self.read_bytes < self.size

    @property
    def complete(self) -> bool:
        """True when ``text`` is the whole file, unchanged (the model may count it as read)."""
        return not self.bytes_cut and not self.long_lines


@dataclass
class ScanResult:
    """Every memory file of the directory (``MEMORY.md`` excluded), sorted by file name."""

    files: list[MemoryFile]

    @functools.cached_property
    def valid(self) -> list[MemoryFile]:
        return [f for f in self.files if f.valid]

    @functools.cached_property
    def invalid(self) -> list[MemoryFile]:
        return [f for f in self.files if not f.valid]

    @functools.cached_property
    def invalid_signature(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """File names and errors of the invalid files (what the system prompt lists)."""
        return tuple((f.filename, tuple(f.errors)) for f in self.invalid)

    @functools.cached_property
    def valid_by_name(self) -> dict[str, MemoryFile]:
        return {f.filename: f for f in self.valid}

    def by_name(self) -> dict[str, MemoryFile]:
        return {f.filename: f for f in self.files}

    @functools.cached_property
    def signature(self) -> tuple[tuple[str, float | None, int], ...]:
        return tuple((f.filename, f.mtime, f.size) for f in self.files)
