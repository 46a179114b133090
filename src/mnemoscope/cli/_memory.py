"""``mnemoscope memory``: inspect and repair an agentic (Markdown) memory directory.

Usage (``WORKDIR`` may be given positionally or with ``--workdir``)::

    mnemoscope memory ls /tmp/demo                      # type, name, file, age, description
    mnemoscope memory show /tmp/demo user_profile
    mnemoscope memory search /tmp/demo "where does the user live"
    mnemoscope memory doctor /tmp/demo [--fix]
    mnemoscope memory index /tmp/demo --rebuild

``WORKDIR`` defaults to ``$MNEMOSCOPE_WORKDIR`` or the current directory; memories are
read from ``<workdir>/Memory``. For ``show`` and ``search`` a workdir given positionally
comes first or last (it must be an existing directory). Exit status: 0 on success, 1 when
``doctor`` leaves problems or a memory is not found, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from mnemoscope.cli._text import Subcommands, merge_location, pick_location, plural, progress
from mnemoscope.errors import CLIUsageError

# the agentic memory modules are imported when a memory command runs, not when the
# `mnemoscope` parser is built (`mnemoscope ltm ...` and `--version` do not need them)
if TYPE_CHECKING:
    from mnemoscope.memory.markdown import Finding, MemoryStore


def add_memory_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``memory`` and its subcommands to the ``mnemoscope`` parser."""
    subs = Subcommands(subparsers, "memory", help="inspect agentic Markdown memory")
    subs.location(
        "WORKDIR",
        "--workdir",
        help="the agent's workdir; memories are in <workdir>/Memory "
        "(default: $MNEMOSCOPE_WORKDIR or .)",
    )
    subs.option("--memory-dir", help="directory name under workdir (default: Memory)")
    subs.option("--json", action="store_true", help="print JSON")
    ls = subs.add("ls", _ls, "list memories", location=True)
    ls.add_argument(
        "--type", choices=["user", "feedback", "project", "reference"], help="only this type"
    )
    subs.add(
        "show",
        _show,
        "print one memory",
        words="NAME",
        words_help="file name (with or without .md) or the memory's name",
        usage="mnemoscope memory show [WORKDIR] NAME [options]",
    )
    search = subs.add(
        "search",
        _search,
        "rank memories for a query with the local BM25 ranker",
        words="QUERY",
        usage="mnemoscope memory search [WORKDIR] QUERY [options]",
    )
    search.add_argument("-k", type=int, default=10, help="results to show (default 10)")
    doctor = subs.add("doctor", _doctor, "check frontmatter, index and duplicates", location=True)
    doctor.add_argument("--fix", action="store_true", help="repair what can be repaired safely")
    doctor.add_argument("--index-max-lines", type=int, default=200)
    doctor.add_argument("--index-max-tokens", type=int, default=4_000)
    index = subs.add("index", _index, "maintain MEMORY.md", location=True)
    index.add_argument(
        "--rebuild", action="store_true", help="regenerate MEMORY.md from the memory files"
    )
    subs.parser.set_defaults(handler=lambda args: run_memory_command(args))
    return subs.parser


def run_memory_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    handler = getattr(args, "memory_handler", None)
    if handler is None:
        out.write("usage: mnemoscope memory {ls,show,search,doctor,index} [--workdir DIR]\n")
        return 2
    positional = getattr(args, "location", None)
    words = getattr(args, "words", None)
    if words is not None:
        positional, rest = pick_location(words, os.path.isdir)
        if args.memory_command == "show":
            if len(rest) != 1:
                raise CLIUsageError(
                    "give one NAME (quote a name with spaces); a WORKDIR before or after it "
                    "must be an existing directory"
                )
            args.name = rest[0]
        else:
            args.query = " ".join(rest)
    workdir = (
        merge_location(positional, getattr(args, "workdir", None), "--workdir")
        or os.environ.get("MNEMOSCOPE_WORKDIR")
        or os.getcwd()
    )
    from mnemoscope.memory.markdown import MEMORY_DIRNAME, MemoryStore

    store = MemoryStore(workdir, memory_dirname=getattr(args, "memory_dir", None) or MEMORY_DIRNAME)
    as_json = bool(getattr(args, "json", False))
    if not os.path.isdir(store.memdir):
        out.write(f"no memory directory at {store.memdir}\n")
        return 1
    return int(asyncio.run(handler(store, args, out, as_json)) or 0)


def _short(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


async def _ls(store: MemoryStore, args: argparse.Namespace, out: TextIO, as_json: bool) -> int:
    from mnemoscope.memory.markdown import format_age

    scan = await store.scan()
    files = [f for f in scan.files if not args.type or f.type == args.type]
    now = time.time()
    if as_json:
        rows = [
            {
                "file": f.filename,
                "type": f.type,
                "name": f.name,
                "description": f.description,
                "age": format_age(f.mtime, now),
                "mtime": f.mtime,
                "errors": f.errors,
            }
            for f in files
        ]
        out.write(json.dumps(rows, ensure_ascii=False, indent=2) + "\n")
        return 0
    if not files:
        out.write(f"no memories in {store.memdir}\n")
        return 0
    out.write(f"{'TYPE':<10} {'NAME':<28} {'FILE':<32} {'AGE':<13} DESCRIPTION\n")
    for f in files:
        kind = f.type or "?"
        if not f.valid:
            kind = "INVALID"
        desc = f.description if f.valid else "; ".join(f.errors)
        out.write(
            f"{kind:<10} {_short(f.name, 28):<28} {_short(f.filename, 32):<32} "
            f"{format_age(f.mtime, now):<13} {_short(desc, 70)}\n"
        )
    out.write(
        f"{plural(len(files), 'memory')} ({sum(not f.valid for f in files)} invalid) "
        f"in {store.memdir}\n"
    )
    return 0


async def _show(store: MemoryStore, args: argparse.Namespace, out: TextIO, as_json: bool) -> int:
    scan = await store.scan()
    wanted = args.name
    match = next((f for f in scan.files if f.filename in (wanted, f"{wanted}.md")), None) or next(
        (f for f in scan.files if (f.name or "").casefold() == wanted.casefold()), None
    )
    if match is None:
        out.write(f"no memory named {wanted!r} in {store.memdir}\n")
        return 1
    text = await store.read_text(match.filename)
    if as_json:
        out.write(
            json.dumps(
                {"file": match.filename, "path": match.path, "content": text}, ensure_ascii=False
            )
            + "\n"
        )
    else:
        out.write(f"# {match.path}\n{text}" + ("" if text.endswith("\n") else "\n"))
    return 0


async def _search(store: MemoryStore, args: argparse.Namespace, out: TextIO, as_json: bool) -> int:
    scan = await store.scan()
    by_name = scan.by_name()
    hits = store.ranker(scan).search(args.query, k=args.k)
    if as_json:
        rows = [
            {"file": k, "score": round(s, 4), "description": by_name[k].description}
            for k, s in hits
        ]
        out.write(json.dumps(rows, ensure_ascii=False, indent=2) + "\n")
        return 0
    if not hits:
        out.write("no matching memories\n")
        return 0
    for key, score in hits:
        out.write(f"{score:7.3f}  {key:<32} {_short(by_name[key].description, 80)}\n")
    return 0


async def _doctor(store: MemoryStore, args: argparse.Namespace, out: TextIO, as_json: bool) -> int:
    from mnemoscope.memory.markdown import diagnose, repair

    limits = {"index_max_lines": args.index_max_lines, "index_max_tokens": args.index_max_tokens}
    report = await diagnose(store, **limits)
    done: list[str] = []
    if args.fix and any(f.fixable for f in report.findings):
        done = await repair(store, report)
        report = await diagnose(store, **limits)
    invalid = {f.file for f in report.findings if f.kind == "invalid_frontmatter" and f.file}
    if as_json:
        out.write(
            json.dumps(
                {
                    "files": report.files,
                    "fixed": done,
                    "findings": [
                        {
                            "kind": f.kind,
                            "message": f.message,
                            "file": f.file,
                            "fixable": f.fixable,
                            **(
                                {"not_fixed_because": why_not_fixed(f, invalid)} if args.fix else {}
                            ),
                        }
                        for f in report.findings
                    ],
                },
                ensure_ascii=False,
                indent=2,
            )
            + "\n"
        )
        return 0 if report.ok else 1
    for line in done:
        out.write(f"fixed: {line}\n")
    for f in report.findings:
        if args.fix:
            out.write(f"not fixed: {f.kind}: {f.message} — {why_not_fixed(f, invalid)}\n")
            continue
        hint = " (fixable with --fix)" if f.fixable else ""
        out.write(f"{f.kind}: {f.message}{hint}\n")
    if report.ok:
        out.write(f"ok: {plural(report.files, 'memory file')}, index consistent\n")
        return 0
    out.write(f"{plural(len(report.findings), 'problem')} in {store.memdir}\n")
    return 1


_WHY_NOT = {
    "invalid_frontmatter": "a person must decide: the missing or wrong name, description or type "
    "cannot be guessed; edit the file's frontmatter or delete the file",
    "near_duplicate": "merging two memories changes what they say; merge them or delete one "
    "by hand",
    "index_over_budget": "shortening MEMORY.md means choosing which entries to drop; shorten "
    "descriptions or move detail into topic files",
    "loose_yaml": "its fields are not all plain text, or its type is not one of user, feedback, "
    "project, reference; rewrite the frontmatter by hand",
}


def why_not_fixed(finding: Finding, invalid: set[str] | None = None) -> str:
    """Why ``doctor --fix`` left a problem, and what to do about it.

    ``invalid``: the files whose frontmatter is invalid (they get no index line).
    """
    if finding.kind in _WHY_NOT:
        return _WHY_NOT[finding.kind]
    if finding.kind == "missing_from_index" and finding.file in (invalid or set()):
        return (
            "its frontmatter is invalid, so there is no name or description to index; fix "
            "the frontmatter, then run doctor --fix again"
        )
    if finding.fixable:
        return "MEMORY.md changed while it was repaired (an agent wrote it); run doctor --fix again"
    return "there is no safe automatic repair for it; fix it by hand"


async def _index(store: MemoryStore, args: argparse.Namespace, out: TextIO, as_json: bool) -> int:
    if not args.rebuild:
        out.write((await store.read_index()).text)
        return 0
    from mnemoscope.memory.markdown import rebuild_index

    progress(f"rebuilding {store.index_path} from the memory files...")
    files = await rebuild_index(store)
    out.write(f"rebuilt {store.index_path} with {plural(len(files), 'entry')}\n")
    return 0
