"""``mnemoscope ltm``: inspect a native long-term memory store (one SQLite file).

Usage (``STORE`` may be given positionally or with ``--db``)::

    mnemoscope ltm users STORE                              # who has memories, how many
    mnemoscope ltm ls STORE --user alice [--all] [--json]
    mnemoscope ltm search STORE "where does she live" --user alice [--limit 5]
        [--mode lexical|hybrid|dense] [--embedding local|hash|static [--embedder-dir DIR]]
    mnemoscope ltm forget STORE ID [ID ...]                 # delete memories by id
    mnemoscope ltm forget STORE --user alice --everything   # erase a user
    mnemoscope ltm export STORE --user alice [--out alice.jsonl] [--history]
    mnemoscope ltm reembed STORE --embedding local          # after changing the embedder
    mnemoscope ltm reembed STORE --embedding static --embedder-dir DIR
    mnemoscope ltm build-embedder DIR [--dims 256]          # distil a static embedder, offline

``STORE`` defaults to ``$MNEMOSCOPE_LTM_DB`` or ``mnemoscope_ltm.db``. The CLI never
creates a store and never adds tables to a file: ``users``, ``ls``, ``search`` and
``export`` open it read-only (the file stays byte for byte the same), ``forget`` and
``reembed`` need a file that already holds a store. ``search`` is lexical (BM25) unless an
embedder is named with ``--embedding``: ``local`` is the MiniLM model of the ``local``
extra, ``hash`` the deterministic test embedder of :mod:`mnemoscope.testing` (the demo's
store); it must be the model the store was built with (``reembed`` switches a store to
another one). ``export`` writes JSON lines, one memory each, superseded and expired ones
included. Exit status: 0 on success (also when nothing matches: that is said on stderr),
1 when an id to forget is unknown, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from mnemoscope.cli._text import Subcommands, merge_location, pick_location, plural, progress
from mnemoscope.errors import CLIUsageError

DB_ENV = "MNEMOSCOPE_LTM_DB"
DEFAULT_DB = "mnemoscope_ltm.db"
EMBEDDERS = ("local", "hash", "static")
STATIC_ENV = "MNEMOSCOPE_STATIC_EMBEDDER"


def _add_embedder_dir(parser: argparse.ArgumentParser) -> None:
    """The ``--embedder-dir`` option of the subcommands that take ``--embedding``."""
    parser.add_argument(
        "--embedder-dir",
        default=None,
        help=f"for --embedding static: the `ltm build-embedder` output (default: ${STATIC_ENV})",
    )


def add_ltm_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``ltm`` and its subcommands to the ``mnemoscope`` parser."""
    subs = Subcommands(subparsers, "ltm", help="inspect a native long-term memory store")
    subs.location(
        "STORE",
        "--db",
        help=f"the store file, also accepted positionally (default: ${DB_ENV} or {DEFAULT_DB})",
    )
    subs.option("--user", help="the user_id")
    subs.option("--agent", help="only this agent_id")
    subs.option("--run", help="only this run_id")
    subs.option("--json", action="store_true", help="JSON output")

    subs.add("users", _users, "the users of a store and their counts", location=True)

    ls = subs.add("ls", _ls, "list a user's memories, oldest first", location=True)
    ls.add_argument("--all", action="store_true", help="include superseded and expired ones")
    ls.add_argument("--limit", type=int, default=None, help="at most this many")

    search = subs.add(
        "search",
        _search,
        "rank a user's memories for a query",
        words="QUERY",
        usage="mnemoscope ltm search [STORE] QUERY [--user USER] [options]",
    )
    search.add_argument("--limit", type=int, default=5)
    search.add_argument("--mode", choices=["lexical", "hybrid", "dense"], default=None)
    search.add_argument(
        "--embedding",
        choices=EMBEDDERS,
        default=None,
        help="embed the query (hybrid search) with the local MiniLM model or the test "
        "hash embedder; must be what the store was built with",
    )
    _add_embedder_dir(search)

    forget = subs.add(
        "forget",
        _forget,
        "delete memories by id, or a whole user",
        usage="mnemoscope ltm forget [STORE] ID [ID ...] | [STORE] --user USER --everything",
    )
    forget.add_argument("ids", nargs="*", metavar="ID")
    forget.add_argument(
        "--everything", action="store_true", help="erase every memory and history of --user"
    )

    export = subs.add("export", _export, "write a user's memories as JSON lines", location=True)
    export.add_argument("--out", default=None, help="file to write (default: stdout)")
    export.add_argument("--history", action="store_true", help="include each memory's history")

    reembed = subs.add(
        "reembed", _reembed, "re-embed every memory with another embedding model", location=True
    )
    reembed.add_argument("--embedding", choices=EMBEDDERS, required=True)
    reembed.add_argument("--batch-size", type=int, default=256)
    _add_embedder_dir(reembed)

    build = subs.add(
        "build-embedder",
        _build_embedder,
        "distil the local MiniLM into a static embedder (offline, ~45 s of CPU)",
        common=False,
        description="Distil all-MiniLM-L6-v2 into a static (model2vec) embedder: a token "
        "table that embeds a query in well under a millisecond, for big imports, tests and "
        "small machines. Offline; needs the 'local' extra (or 'local-torch' for "
        "--teacher torch).",
    )
    build.add_argument("out_dir", metavar="OUT_DIR", help="the directory to write (new or empty)")
    build.add_argument("--dims", type=int, default=256, help="vector dimensions (default: 256)")
    build.add_argument(
        "--teacher",
        choices=["auto", "onnx", "torch"],
        default="auto",
        help="the MiniLM to distil from: onnx (the 'local' extra), torch (float32, "
        "'local-torch'), auto (onnx when installed)",
    )
    build.add_argument("--threads", type=int, default=None, help="compute threads (default: all)")
    build.add_argument(
        "--overwrite", action="store_true", help="replace the embedder already in OUT_DIR"
    )
    build.set_defaults(ltm_needs_store=False)

    subs.parser.set_defaults(handler=run_ltm, ltm_parser=subs.parser)
    return subs.parser


def run_ltm(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run an ``ltm`` subcommand; returns the exit status.

    Raises:
        MnemoscopeError: a user error (the ``mnemoscope`` command prints it on one line).
    """
    out = out or sys.stdout
    handler = getattr(args, "ltm_handler", None)
    if handler is None:
        args.ltm_parser.print_help(out)
        return 2
    if not getattr(args, "ltm_needs_store", True):
        return int(asyncio.run(handler(args, "", out)) or 0)
    db = _store_path(args)
    if db != ":memory:" and not Path(db).is_file():
        where = "a directory, not a store file" if Path(db).is_dir() else "no such file"
        raise CLIUsageError(
            f"no store at {db!r} ({where}); pass the store file (mnemoscope ltm "
            f"{args.ltm_command} STORE, or --db STORE, or set ${DB_ENV})"
        )
    return int(asyncio.run(handler(args, db, out)) or 0)


def _store_path(args: argparse.Namespace) -> str:
    flag = getattr(args, "db", None)
    positional: str | None = getattr(args, "location", None)
    if args.ltm_command == "search":
        positional, rest = pick_location(args.words, _looks_like_store)
        args.query = " ".join(rest)
    elif (
        # memory ids are hex: a first argument naming a file (or *.db) is the store
        args.ltm_command == "forget"
        and flag is None
        and args.ids
        and _looks_like_store(args.ids[0])
    ):
        positional, args.ids = args.ids[0], args.ids[1:]
    path = merge_location(positional, flag, "--db")
    return path or os.environ.get(DB_ENV) or DEFAULT_DB


def _looks_like_store(text: str) -> bool:
    return Path(text).is_file() or text.endswith((".db", ".sqlite", ".sqlite3"))


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    user = getattr(args, "user", None)
    if not user:
        raise CLIUsageError(
            "--user is required (`mnemoscope ltm users STORE` lists the users of a store)"
        )
    return {
        "user_id": user,
        "agent_id": getattr(args, "agent", None),
        "run_id": getattr(args, "run", None),
    }


def _open(db: str, *, embedder: Any = None, read_only: bool = True) -> Any:
    from mnemoscope.memory import LocalLongTermMemory

    return LocalLongTermMemory(db, embedding_model=embedder, read_only=read_only, create=False)


def _static_dir(args: argparse.Namespace) -> str:
    folder = getattr(args, "embedder_dir", None) or os.environ.get(STATIC_ENV)
    if not folder:
        raise CLIUsageError(
            f"--embedding static needs --embedder-dir DIR (or ${STATIC_ENV}); build one with "
            "`mnemoscope ltm build-embedder DIR`"
        )
    return folder


def _embedder(name: str, stored: tuple[str, int] | None, args: argparse.Namespace) -> Any:
    if name == "static":
        from mnemoscope.embedding import StaticEmbeddingModel

        return StaticEmbeddingModel(_static_dir(args))
    if name == "hash":
        from mnemoscope.testing import HashEmbeddingModel

        if stored is not None and stored[0].startswith("hash"):
            return HashEmbeddingModel(stored[1], model=stored[0])
        return HashEmbeddingModel()
    from mnemoscope.embedding import LocalEmbeddingModel

    model = LocalEmbeddingModel()
    progress(f"loading the local embedding model {model.model} (a few seconds)...")
    return model


def _expected(name: str, args: argparse.Namespace) -> tuple[str, int]:
    """The (model, dimensions) ``--embedding name`` stands for, without loading MiniLM."""
    if name == "static":
        model = _embedder(name, None, args)  # a table read, no model to run
        return model.model, model.dimensions
    if name == "hash":
        return "hash-embedding", 256
    from mnemoscope.embedding import DEFAULT_LOCAL_MODEL

    return DEFAULT_LOCAL_MODEL, 384


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


async def _explain_empty(
    store: Any, args: argparse.Namespace, scope: dict[str, Any], out: TextIO, query: str | None
) -> None:
    """Say why nothing was printed: an unknown user, a narrow scope, or no match."""
    users = await store.users()
    user = scope["user_id"]
    mine = next((u for u in users if u.user_id == user), None)
    narrowed = "".join(
        f" {flag} {scope[key]!r}"
        for key, flag in (("agent_id", "--agent"), ("run_id", "--run"))
        if scope[key] is not None
    )
    if mine is None:
        known = ", ".join(repr(u.user_id) for u in users[:20]) or "none: the store is empty"
        more = f" and {len(users) - 20} more" if len(users) > 20 else ""
        message = f"no memories for user {user!r} (users in this store: {known}{more})"
    elif query is not None:
        message = (
            f"no memories of user {user!r}{narrowed} match {query!r} "
            f"({plural(mine.active, 'memory')} in all; `mnemoscope ltm ls` lists them)"
        )
    elif narrowed:
        count = plural(mine.active, "memory")
        message = f"no memories for user {user!r} with{narrowed} ({count} in all)"
    else:
        message = (
            f"no active memories for user {user!r} ({plural(mine.total, 'memory')} superseded "
            "or expired; --all shows them)"
        )
    # JSON output stays parseable: the explanation goes to stderr then
    target = sys.stderr if getattr(args, "json", False) else out
    target.write(message + "\n")


async def _users(args: argparse.Namespace, db: str, out: TextIO) -> int:
    async with _open(db) as store:
        users = await store.users()
    if getattr(args, "json", False):
        json.dump([u.model_dump() for u in users], out, indent=2, ensure_ascii=False)
        out.write("\n")
        return 0
    if not users:
        out.write(f"no memories in {db} (the store is empty)\n")
        return 0
    width = max(4, *(len(u.user_id) for u in users))
    out.write(f"{'USER':<{width}}  ACTIVE  TOTAL\n")
    for u in users:
        out.write(f"{u.user_id:<{width}}  {u.active:>6}  {u.total:>5}\n")
    out.write(f"{plural(len(users), 'user')} in {db}\n")
    return 0


async def _ls(args: argparse.Namespace, db: str, out: TextIO) -> int:
    scope = _scope(args)
    async with _open(db) as store:
        items = await store.list(
            **scope, include_superseded=args.all, include_expired=args.all, limit=args.limit
        )
        _dump(items, args, out)
        if not items:
            await _explain_empty(store, args, scope, out, None)
    return 0


async def _search(args: argparse.Namespace, db: str, out: TextIO) -> int:
    scope = _scope(args)
    if not args.query.strip():
        raise CLIUsageError("give a QUERY to search for")
    mode = args.mode or ("hybrid" if args.embedding else "lexical")
    if mode != "lexical" and not args.embedding:
        raise CLIUsageError(f"--mode {mode} needs --embedding local (or hash)")
    embedder = None
    if args.embedding:
        # check the store's vectors before loading any model (MiniLM takes seconds)
        async with _open(db) as probe:
            stored = await probe.stored_embedding()
        expected = _expected(args.embedding, args)
        if stored is None:
            if mode == "dense":
                raise CLIUsageError(
                    f"{db!r} has no vectors (it was built without an embedding model); search "
                    f"lexically, or add vectors once: mnemoscope ltm reembed {db} "
                    f"--embedding {args.embedding}"
                )
            progress(f"{db} has no vectors: searching lexically (BM25)")
            mode = "lexical"
        elif stored != expected and not (args.embedding == "hash" and stored[0] == expected[0]):
            raise CLIUsageError(
                f"{db!r} holds {stored[1]}-dimensional vectors from {stored[0]!r}, but "
                f"--embedding {args.embedding} is {expected[0]!r} ({expected[1]} dimensions); "
                f"search without --embedding (lexical), or re-embed the store once: "
                f"mnemoscope ltm reembed {db} --embedding {args.embedding}"
            )
        else:
            embedder = _embedder(args.embedding, stored, args)
    async with _open(db, embedder=embedder) as store:
        items = await store.retrieve(args.query, **scope, limit=args.limit, mode=mode)
        _dump(items, args, out)
        if not items:
            await _explain_empty(store, args, scope, out, args.query)
    return 0


async def _forget(args: argparse.Namespace, db: str, out: TextIO) -> int:
    if args.everything:
        if args.ids:
            raise CLIUsageError("give either IDs or --user with --everything, not both")
        scope = _scope(args)
        async with _open(db, read_only=False) as store:
            n = await store.erase_user(scope["user_id"])
        out.write(f"erased {plural(n, 'memory')} of user {scope['user_id']!r}\n")
        return 0
    if not args.ids:
        raise CLIUsageError("give the IDs to forget (see `ltm ls`), or --user U --everything")
    missing = 0
    async with _open(db, read_only=False) as store:
        for mem_id in args.ids:
            if await store.delete(mem_id):
                out.write(f"forgot {mem_id}\n")
            else:
                missing += 1
                print(f"mnemoscope ltm forget: no memory {mem_id!r} in {db}", file=sys.stderr)
    return 1 if missing else 0


async def _export(args: argparse.Namespace, db: str, out: TextIO) -> int:
    scope = _scope(args)
    async with _open(db) as store:
        items = await store.list(**scope, include_superseded=True, include_expired=True)
        rows = []
        for item in items:
            row = item.model_dump(mode="json")
            if args.history:
                row["history"] = [h.model_dump(mode="json") for h in await store.history(item.id)]
            rows.append(json.dumps(row, ensure_ascii=False))
        if not items:
            await _explain_empty(store, argparse.Namespace(json=True), scope, out, None)
    if args.out:
        text = "".join(r + "\n" for r in rows)
        await asyncio.to_thread(Path(args.out).write_text, text, encoding="utf-8")
        out.write(f"exported {plural(len(rows), 'memory')} to {args.out}\n")
    else:
        out.write("".join(r + "\n" for r in rows))
    return 0


async def _reembed(args: argparse.Namespace, db: str, out: TextIO) -> int:
    if args.batch_size < 1:
        raise CLIUsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    async with _open(db) as probe:
        stored = await probe.stored_embedding()
    embedder = _embedder(args.embedding, None, args)
    before = f"{stored[0]!r} ({stored[1]} dimensions)" if stored else "no vectors"

    def report(done: int, total: int) -> None:
        if done == 0:
            progress(f"re-embedding {plural(total, 'memory')} with {embedder.model}...")
        else:
            progress(f"  {done}/{total}")

    async with _open(db, embedder=embedder, read_only=False) as store:
        n = await store.reembed(batch_size=args.batch_size, progress=report)
    out.write(
        f"re-embedded {plural(n, 'memory')} in {db}: {before} -> {embedder.model!r} "
        f"({embedder.dimensions} dimensions)\n"
    )
    return 0


async def _build_embedder(args: argparse.Namespace, db: str, out: TextIO) -> int:
    """``ltm build-embedder OUT_DIR``: distil a static embedder (``db`` is unused)."""
    import time

    from mnemoscope.embedding import build_static_embedder, static_model_name

    if not 1 <= args.dims <= 384:
        raise CLIUsageError(f"--dims must be between 1 and 384 (MiniLM's size), got {args.dims}")
    if args.threads is not None and args.threads < 1:
        raise CLIUsageError(f"--threads must be >= 1, got {args.threads}")
    started = time.monotonic()
    shown = [0]

    def report(done: int, total: int) -> None:
        if done == total or done * 10 // total > shown[0]:
            shown[0] = done * 10 // total
            progress(f"  {done}/{total} tokens ({time.monotonic() - started:.0f} s)")

    progress(f"distilling all-MiniLM-L6-v2 into a {args.dims}-dimensional static embedder...")
    path = await asyncio.to_thread(
        build_static_embedder,
        args.out_dir,
        pca_dims=args.dims,
        teacher=args.teacher,
        threads=args.threads,
        overwrite=args.overwrite,
        progress=report,
    )
    out.write(
        f"built {static_model_name(args.dims)!r} ({args.dims} dimensions) in {path} "
        f"in {time.monotonic() - started:.0f} s; load it with "
        f"mnemoscope.embedding.StaticEmbeddingModel({str(path)!r}), or switch a store to it "
        f"with: mnemoscope ltm reembed STORE --embedding static --embedder-dir {path}\n"
    )
    return 0
