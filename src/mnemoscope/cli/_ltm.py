"""``mnemoscope ltm``: inspect a native long-term memory store (one SQLite file).

Usage::

    mnemoscope ltm ls --db mnemoscope_ltm.db --user alice [--all] [--json]
    mnemoscope ltm search "where does she live" --db ltm.db --user alice [--limit 5]
        [--mode lexical|hybrid|dense] [--embedding local]
    mnemoscope ltm forget ID [ID ...] --db ltm.db          # delete memories by id
    mnemoscope ltm forget --db ltm.db --user alice --everything   # erase a user
    mnemoscope ltm export --db ltm.db --user alice [--out alice.jsonl] [--history]

``--db`` defaults to ``$MNEMOSCOPE_LTM_DB`` or ``mnemoscope_ltm.db``; a missing file is an
error (the CLI never creates a store). ``search`` is lexical (BM25) unless an embedder is
named with ``--embedding local`` (the MiniLM model of the ``local`` extra), which must be
the model the store was built with. ``export`` writes JSON lines, one memory each,
superseded and expired ones included. Exit status: 0 on success, 1 when an id to forget
is unknown, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

DB_ENV = "MNEMOSCOPE_LTM_DB"
DEFAULT_DB = "mnemoscope_ltm.db"


def add_ltm_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``ltm`` and its subcommands to the ``mnemoscope`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        help=f"the store file (default: ${DB_ENV} or {DEFAULT_DB})",
    )
    common.add_argument("--user", default=argparse.SUPPRESS, help="the user_id")
    common.add_argument("--agent", default=argparse.SUPPRESS, help="only this agent_id")
    common.add_argument("--run", default=argparse.SUPPRESS, help="only this run_id")
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="JSON output"
    )

    parser = subparsers.add_parser(
        "ltm", help="inspect a native long-term memory store", parents=[common]
    )
    sub = parser.add_subparsers(dest="ltm_command", metavar="SUBCOMMAND")
    ls = sub.add_parser("ls", help="list a user's memories, oldest first", parents=[common])
    ls.add_argument("--all", action="store_true", help="include superseded and expired ones")
    ls.add_argument("--limit", type=int, default=None, help="at most this many")
    ls.set_defaults(ltm_handler=_ls)

    search = sub.add_parser("search", help="rank a user's memories for a query", parents=[common])
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=5)
    search.add_argument("--mode", choices=["lexical", "hybrid", "dense"], default=None)
    search.add_argument(
        "--embedding",
        choices=["local"],
        default=None,
        help="embed the query with the local MiniLM model (hybrid search)",
    )
    search.set_defaults(ltm_handler=_search)

    forget = sub.add_parser(
        "forget", help="delete memories by id, or a whole user", parents=[common]
    )
    forget.add_argument("ids", nargs="*", metavar="ID")
    forget.add_argument(
        "--everything", action="store_true", help="erase every memory and history of --user"
    )
    forget.set_defaults(ltm_handler=_forget)

    export = sub.add_parser(
        "export", help="write a user's memories as JSON lines", parents=[common]
    )
    export.add_argument("--out", default=None, help="file to write (default: stdout)")
    export.add_argument("--history", action="store_true", help="include each memory's history")
    export.set_defaults(ltm_handler=_export)

    parser.set_defaults(handler=run_ltm, ltm_parser=parser)
    return parser


def run_ltm(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run an ``ltm`` subcommand; returns the exit status."""
    out = out or sys.stdout
    handler = getattr(args, "ltm_handler", None)
    if handler is None:
        args.ltm_parser.print_help(out)
        return 2
    db = getattr(args, "db", None) or os.environ.get(DB_ENV) or DEFAULT_DB
    if db != ":memory:" and not Path(db).is_file():
        print(f"mnemoscope ltm: no store at {db!r} (pass --db PATH)", file=sys.stderr)
        return 2
    try:
        return int(asyncio.run(handler(args, db, out)) or 0)
    except _UsageError as exc:
        print(f"mnemoscope ltm {args.ltm_command}: {exc}", file=sys.stderr)
        return 2


class _UsageError(Exception):
    pass


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    user = getattr(args, "user", None)
    if not user:
        raise _UsageError("--user is required")
    return {
        "user_id": user,
        "agent_id": getattr(args, "agent", None),
        "run_id": getattr(args, "run", None),
    }


def _open(db: str, embedding: str | None = None) -> Any:
    from mnemoscope.memory._local_ltm import LocalLongTermMemory

    model = None
    if embedding == "local":
        from mnemoscope import embedding as emb

        model = emb.LocalEmbeddingModel()
    return LocalLongTermMemory(db, embedding_model=model)


def _line(item: Any) -> str:
    when = item.occurred_at or item.created_at
    stamp = f"{when:%Y-%m-%d}" if when else "-"
    status = "" if item.status == "active" else f" [{item.status}]"
    score = f"{item.score:6.3f}  " if item.score is not None else ""
    text = item.content if len(item.content) <= 100 else item.content[:99] + "…"
    speaker = item.metadata.get("speaker")
    text = f"{speaker}: {text}" if speaker else text
    return f"{score}{item.id}  {stamp}{status}  {text}"


def _dump(items: list[Any], args: argparse.Namespace, out: TextIO) -> None:
    if getattr(args, "json", False):
        json.dump([i.model_dump(mode="json") for i in items], out, indent=2, ensure_ascii=False)
        out.write("\n")
        return
    for item in items:
        out.write(_line(item) + "\n")


async def _ls(args: argparse.Namespace, db: str, out: TextIO) -> int:
    async with _open(db) as store:
        items = await store.list(
            **_scope(args),
            include_superseded=args.all,
            include_expired=args.all,
            limit=args.limit,
        )
    _dump(items, args, out)
    return 0


async def _search(args: argparse.Namespace, db: str, out: TextIO) -> int:
    mode = args.mode or ("hybrid" if args.embedding else "lexical")
    if mode != "lexical" and not args.embedding:
        raise _UsageError(f"--mode {mode} needs --embedding local")
    async with _open(db, args.embedding) as store:
        items = await store.retrieve(args.query, **_scope(args), limit=args.limit, mode=mode)
    _dump(items, args, out)
    return 0


async def _forget(args: argparse.Namespace, db: str, out: TextIO) -> int:
    if args.everything:
        if args.ids:
            raise _UsageError("give either IDs or --user with --everything, not both")
        scope = _scope(args)
        async with _open(db) as store:
            n = await store.erase_user(scope["user_id"])
        out.write(f"erased {n} memories of user {scope['user_id']!r}\n")
        return 0
    if not args.ids:
        raise _UsageError("give the IDs to forget (see `ltm ls`), or --user U --everything")
    missing = 0
    async with _open(db) as store:
        for mem_id in args.ids:
            if await store.delete(mem_id):
                out.write(f"forgot {mem_id}\n")
            else:
                missing += 1
                print(f"mnemoscope ltm forget: no memory {mem_id!r}", file=sys.stderr)
    return 1 if missing else 0


async def _export(args: argparse.Namespace, db: str, out: TextIO) -> int:
    async with _open(db) as store:
        items = await store.list(**_scope(args), include_superseded=True, include_expired=True)
        rows = []
        for item in items:
            row = item.model_dump(mode="json")
            if args.history:
                row["history"] = [h.model_dump(mode="json") for h in await store.history(item.id)]
            rows.append(json.dumps(row, ensure_ascii=False))
    if args.out:
        text = "".join(r + "\n" for r in rows)
        await asyncio.to_thread(Path(args.out).write_text, text, encoding="utf-8")
        out.write(f"exported {len(rows)} memories to {args.out}\n")
    else:
        out.write("".join(r + "\n" for r in rows))
    return 0
