"""``mnemoscope memory``: inspect and repair an agentic (Markdown) memory directory.

Usage::

    mnemoscope memory ls --workdir /tmp/demo            # type, name, file, age, description
    mnemoscope memory show user_profile --workdir /tmp/demo
    mnemoscope memory search "where does the user live" --workdir /tmp/demo
    mnemoscope memory doctor --workdir /tmp/demo [--fix]
    mnemoscope memory index --rebuild --workdir /tmp/demo

``--workdir`` defaults to ``$MNEMOSCOPE_WORKDIR`` or the current directory; memories are
read from ``<workdir>/Memory``. Exit status: 0 on success, 1 when ``doctor`` leaves
problems or a memory is not found, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any, TextIO

from mnemoscope.middleware._agentic_doctor import diagnose, rebuild_index, repair
from mnemoscope.middleware._agentic_files import MEMORY_DIRNAME, format_age
from mnemoscope.middleware._agentic_store import MemoryStore


def add_memory_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``memory`` and its subcommands to the ``mnemoscope`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--workdir",
        default=argparse.SUPPRESS,
        help="the agent's workdir; memories are in <workdir>/Memory "
        "(default: $MNEMOSCOPE_WORKDIR or .)",
    )
    common.add_argument(
        "--memory-dir",
        default=argparse.SUPPRESS,
        help="directory name under workdir (default: Memory)",
    )
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")

    parser = subparsers.add_parser(
        "memory", help="inspect agentic Markdown memory", parents=[common]
    )
    sub = parser.add_subparsers(dest="memory_command", metavar="SUBCOMMAND")
    ls = sub.add_parser("ls", help="list memories", parents=[common])
    ls.add_argument(
        "--type", choices=["user", "feedback", "project", "reference"], help="only this type"
    )
    ls.set_defaults(memory_handler=_ls)
    show = sub.add_parser("show", help="print one memory", parents=[common])
    show.add_argument("name", help="file name (with or without .md) or the memory's name")
    show.set_defaults(memory_handler=_show)
    search = sub.add_parser(
        "search", help="rank memories for a query with the local BM25 ranker", parents=[common]
    )
    search.add_argument("query")
    search.add_argument("-k", type=int, default=10, help="results to show (default 10)")
    search.set_defaults(memory_handler=_search)
    doctor = sub.add_parser(
        "doctor", help="check frontmatter, index and duplicates", parents=[common]
    )
    doctor.add_argument("--fix", action="store_true", help="repair what can be repaired safely")
    doctor.add_argument("--index-max-lines", type=int, default=200)
    doctor.add_argument("--index-max-tokens", type=int, default=4_000)
    doctor.set_defaults(memory_handler=_doctor)
    index = sub.add_parser("index", help="maintain MEMORY.md", parents=[common])
    index.add_argument(
        "--rebuild", action="store_true", help="regenerate MEMORY.md from the memory files"
    )
    index.set_defaults(memory_handler=_index)
    parser.set_defaults(handler=lambda args: run_memory_command(args))
    return parser


def run_memory_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    handler = getattr(args, "memory_handler", None)
    if handler is None:
        out.write("usage: mnemoscope memory {ls,show,search,doctor,index} [--workdir DIR]\n")
        return 2
    workdir = getattr(args, "workdir", None) or os.environ.get("MNEMOSCOPE_WORKDIR") or os.getcwd()
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
        f"{len(files)} memories ({sum(not f.valid for f in files)} invalid) in {store.memdir}\n"
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
    limits = {"index_max_lines": args.index_max_lines, "index_max_tokens": args.index_max_tokens}
    report = await diagnose(store, **limits)
    done: list[str] = []
    if args.fix and any(f.fixable for f in report.findings):
        done = await repair(store, report)
        report = await diagnose(store, **limits)
    if as_json:
        out.write(
            json.dumps(
                {
                    "files": report.files,
                    "fixed": done,
                    "findings": [
                        {"kind": f.kind, "message": f.message, "file": f.file, "fixable": f.fixable}
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
        hint = " (fixable with --fix)" if f.fixable and not args.fix else ""
        out.write(f"{f.kind}: {f.message}{hint}\n")
    if report.ok:
        out.write(f"ok: {report.files} memory files, index consistent\n")
        return 0
    out.write(f"{len(report.findings)} problem(s) in {store.memdir}\n")
    return 1


async def _index(store: MemoryStore, args: argparse.Namespace, out: TextIO, as_json: bool) -> int:
    if not args.rebuild:
        out.write((await store.read_index()).text)
        return 0
    files = await rebuild_index(store)
    out.write(f"rebuilt {store.index_path} with {len(files)} entries\n")
    return 0
