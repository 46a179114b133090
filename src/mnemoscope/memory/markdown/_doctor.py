"""Checks and safe repairs of an agentic memory directory (``mnemoscope memory doctor``).

Example::

    store = MemoryStore("/tmp/demo")
    report = await diagnose(store)
    for finding in report.findings:
        print(finding.kind, finding.message)
    await repair(store, report)          # only what can be fixed without guessing
    await rebuild_index(store)           # MEMORY.md regenerated from the files
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mnemoscope.errors import MemoryStoreError
from mnemoscope.memory.markdown._files import (
    INDEX_FILENAME,
    MEMORY_TYPES,
    IndexEntry,
    MemoryFile,
    add_index_lines,
    bound_index,
    index_line,
    parse_frontmatter,
    parse_index,
    render_memory_file,
)
from mnemoscope.memory.markdown._ranker import tokenize
from mnemoscope.memory.markdown._store import (
    MAX_INDEX_BYTES,
    MAX_INDEX_LINE_CHARS,
    IndexSnapshot,
    MemoryStore,
    ScanResult,
)
from mnemoscope.model import count_tokens

NEAR_DUPLICATE_JACCARD = 0.8
"""Two memories whose term sets overlap this much (Jaccard) are reported as near-duplicates."""

FIXABLE = frozenset(
    {"missing_from_index", "dangling_index_line", "duplicate_index_line", "loose_yaml"}
)


@dataclass
class Finding:
    """One problem. ``fixable`` ones are repaired by :func:`repair`."""

    kind: str
    message: str
    file: str | None = None
    lineno: int | None = None

    @property
    def fixable(self) -> bool:
        return self.kind in FIXABLE


@dataclass
class DoctorReport:
    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    index_lines: int = 0
    index_complete: bool = True
    """False when ``MEMORY.md`` is over the read limits: it was only partly read, and
    :func:`repair` leaves it alone."""

    @property
    def ok(self) -> bool:
        return not self.findings


async def diagnose(
    store: MemoryStore, *, index_max_lines: int = 200, index_max_tokens: int = 4_000
) -> DoctorReport:
    """Find bad frontmatter, index lines pointing nowhere or repeated, files missing from
    the index, near-duplicate memories and an index over its prompt budget."""
    scan = await store.scan()
    index = await store.read_index()
    text = index.text
    entries = parse_index(text)
    report = DoctorReport(
        files=len(scan.files), index_lines=len(text.splitlines()), index_complete=index.complete
    )
    out = report.findings
    if not index.complete:
        out.append(Finding("index_too_large", _too_large_message(index), INDEX_FILENAME))
    for mf in scan.files:
        if mf.errors:
            out.append(
                Finding(
                    "invalid_frontmatter", f"{mf.filename}: {'; '.join(mf.errors)}", mf.filename
                )
            )
        for w in mf.warnings:
            out.append(Finding("loose_yaml", f"{mf.filename}: {w}", mf.filename))
    names = scan.by_name()
    seen: set[str] = set()
    for e in entries:
        if e.target not in names:
            out.append(
                Finding(
                    "dangling_index_line",
                    f"line {e.lineno} points to {e.target}, which does not exist",
                    e.target,
                    e.lineno,
                )
            )
        elif e.target in seen:
            out.append(
                Finding(
                    "duplicate_index_line",
                    f"line {e.lineno} repeats the entry for {e.target}",
                    e.target,
                    e.lineno,
                )
            )
        seen.add(e.target)
    for mf in scan.files if index.complete else ():  # unread lines may hold them
        if mf.filename not in seen:
            out.append(
                Finding(
                    "missing_from_index", f"{mf.filename} has no line in MEMORY.md", mf.filename
                )
            )
    view = bound_index(
        text, max_lines=index_max_lines, max_tokens=index_max_tokens, count_tokens=count_tokens
    )
    if view.truncated:
        out.append(
            Finding(
                "index_over_budget",
                f"MEMORY.md has {view.total_lines} lines; only {view.shown_lines} fit "
                f"the prompt budget "
                f"({index_max_lines} lines, {index_max_tokens} tokens): merge or remove memories",
            )
        )
    out.extend(_near_duplicates(store, scan))
    return report


def _too_large_message(index: IndexSnapshot) -> str:
    parts = []
    if index.bytes_cut:
        parts.append(
            f"is {index.size} bytes; only the first {index.read_bytes} were read "
            f"(limit {MAX_INDEX_BYTES})"
        )
    if index.long_lines:
        parts.append(f"has {index.long_lines} line(s) over {MAX_INDEX_LINE_CHARS} characters (cut)")
    return (
        f"{INDEX_FILENAME} {' and '.join(parts)}; the agent sees only part of it. Not fixed "
        "automatically (that would drop what was not read): shorten it by hand, or "
        "regenerate it from the files with 'index --rebuild'"
    )


def _near_duplicates(store: MemoryStore, scan: ScanResult) -> list[Finding]:
    valid = scan.valid
    if len(valid) < 2:
        return []
    ranker = store.ranker(scan)
    terms = {f.filename: set(tokenize(f"{f.name} {f.description} {f.body}")) for f in valid}
    out: list[Finding] = []
    reported: set[tuple[str, str]] = set()
    by_name = scan.by_name()
    for mf in valid:
        # the ranker proposes candidates, so this stays far below n^2 comparisons
        for other, _ in ranker.search(f"{mf.name} {mf.description}", k=4):
            if other == mf.filename:
                continue
            pair = (min(mf.filename, other), max(mf.filename, other))
            if pair in reported:
                continue
            a, b = terms[mf.filename], terms[other]
            jaccard = len(a & b) / len(a | b) if a | b else 0.0
            same_name = (mf.name or "").casefold() == (by_name[other].name or "").casefold()
            if jaccard >= NEAR_DUPLICATE_JACCARD or same_name:
                reported.add(pair)
                why = "same name" if same_name else f"{jaccard:.0%} of their terms are shared"
                out.append(
                    Finding(
                        "near_duplicate",
                        f"{pair[0]} and {pair[1]} look like duplicates ({why})",
                        pair[0],
                    )
                )
    return out


async def repair(store: MemoryStore, report: DoctorReport, *, attempts: int = 5) -> list[str]:
    """Fix what is safe: add missing index lines, drop dangling and repeated ones, and
    rewrite frontmatter that was only readable line by line as valid YAML.

    An index over the read limits (finding ``index_too_large``) is never rewritten: only
    part of it was read, and writing that part back would lose the rest.

    Index changes are a compare-and-swap on ``MEMORY.md`` (retried when an agent writes
    it at the same time), so no line an agent adds meanwhile is lost. Returns what was done.
    """
    done: list[str] = []
    for f in report.findings:
        if f.kind == "loose_yaml" and f.file:
            text = await store.read_text(f.file)
            fields, body, errors, _ = parse_frontmatter(text)
            if errors or not all(
                isinstance(fields.get(k), str) for k in ("name", "description", "type")
            ):
                continue
            if fields["type"] not in MEMORY_TYPES:
                continue
            await store.write_text(
                f.file,
                render_memory_file(fields["name"], fields["description"], fields["type"], body),
            )
            done.append(f"rewrote the frontmatter of {f.file} as valid YAML")
    if not report.index_complete or not any(
        f.kind in ("missing_from_index", "dangling_index_line", "duplicate_index_line")
        for f in report.findings
    ):
        return done
    for _ in range(attempts):
        scan = await store.scan()
        index = await store.read_index()
        if not index.complete:
            return done  # rewriting what was read would drop the rest of the file
        new_text, changes = _fix_index(index.text, scan)
        if not changes:
            return done
        try:
            await store.write_index(new_text, expected_version=index.version)
        except MemoryStoreError:
            continue  # someone wrote the index meanwhile: recompute on the new version
        return done + changes
    raise MemoryStoreError(f"{store.index_path} kept changing; run doctor --fix again")


def _fix_index(text: str, scan: ScanResult) -> tuple[str, list[str]]:
    names = scan.by_name()
    lines = text.splitlines()
    entries = {e.lineno: e for e in parse_index(text)}
    kept: list[str] = []
    seen: set[str] = set()
    changes: list[str] = []
    for i, line in enumerate(lines, start=1):
        e: IndexEntry | None = entries.get(i)
        if e is not None and e.target not in names:
            changes.append(f"removed index line {i} (pointed to missing {e.target})")
            continue
        if e is not None and e.target in seen:
            changes.append(f"removed index line {i} (repeated {e.target})")
            continue
        if e is not None:
            seen.add(e.target)
        kept.append(line)
    missing = [mf for mf in scan.valid if mf.filename not in seen]
    for mf in missing:
        changes.append(f"added an index line for {mf.filename}")
    new_text = "\n".join(kept) + ("\n" if kept else "")
    return add_index_lines(new_text, [index_line(mf) for mf in missing]), changes


async def rebuild_index(store: MemoryStore, *, attempts: int = 5) -> list[MemoryFile]:
    """Regenerate ``MEMORY.md`` from the valid memory files (by type, then name).

    Hand-written hooks are replaced by each file's description. Returns the files indexed.
    """
    for _ in range(attempts):
        scan = await store.scan()
        snap = await store.read_index()
        # a partly read index has no exact version: hash the file (an explicit rebuild)
        exact = snap.version if snap.complete else await store.exact_index_version()
        order = {t: i for i, t in enumerate(MEMORY_TYPES)}
        files = sorted(
            scan.valid,
            key=lambda f: (order.get(f.type or "", 99), (f.name or "").casefold(), f.filename),
        )
        text = add_index_lines("", [index_line(mf) for mf in files])
        try:
            await store.write_index(text, expected_version=exact)
        except MemoryStoreError:
            continue
        return files
    raise MemoryStoreError(f"{store.index_path} kept changing; run 'index --rebuild' again")
