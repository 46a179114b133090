"""``mnemoscope inspect``: serve the inspector web page for local use.

Usage::

    mnemoscope inspect --store sqlite+aiosqlite:///sessions.db [--ltm ltm.db | --mem0 DIR]
        [--workdir DIR] [--tokens FILE] [--user ID] [--host 127.0.0.1] [--port 8765]
        [--audit audit.db] [--embedding local|hash] [--system-prompt FILE] [--max-tokens N]

Without ``--tokens`` one user (``--user``, default ``default``, the stores' default user id)
can sign in, with a random token printed in the sign-in link. With ``--tokens`` (lines
``TOKEN USER_ID``, or a JSON object) every listed user signs in with their token and sees
only their own sessions and memories; ``--workdir`` must then contain ``{user_id}``.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mnemoscope.errors import UserError

DEFAULT_PORT = 8765
DEFAULT_AUDIT = "mnemoscope_audit.db"
SHOWN_OPTIONS = ("store", "prefix", "ltm", "mem0", "workdir", "audit", "embedding")
"""The options that say what the inspector shows: ``inspect --<name>`` and
``serve --inspector-<name>`` (see :func:`inspector_app`)."""


def add_inspect_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``inspect`` to the ``mnemoscope`` parser."""
    p = subparsers.add_parser(
        "inspect",
        help="serve a web page showing sessions, model calls and long-term memory",
        description="Serve the inspector: sessions with marks and tool pairs, the model "
        "calls of a reply, the native long-term store and the agentic Markdown memory "
        "(edits recorded in an audit log). Works offline; needs the 'inspector' extra.",
    )
    p.add_argument(
        "--store",
        default=None,
        help="session store URL (sqlite+aiosqlite:///x.db, postgresql+asyncpg://..., redis://...)",
    )
    p.add_argument("--prefix", default="mnemoscope", help="the store's key/table prefix")
    p.add_argument("--ltm", default=None, help="a LocalLongTermMemory file")
    p.add_argument(
        "--mem0",
        default=None,
        metavar="DIR",
        help="instead of --ltm: a Mem0LongTermMemory's local Qdrant directory (needs --embedding)",
    )
    p.add_argument(
        "--embedding",
        choices=("local", "hash"),
        default=None,
        help="the long-term store's embedder (needed to edit a store with vectors, and by --mem0)",
    )
    p.add_argument(
        "--workdir",
        default=None,
        help="agentic memory workdir; with --tokens it must contain {user_id}",
    )
    p.add_argument("--tokens", default=None, help="token file: lines 'TOKEN USER_ID' or JSON")
    p.add_argument("--user", default="default", help="the user id without --tokens")
    p.add_argument("--audit", default=DEFAULT_AUDIT, help=f"audit log (default {DEFAULT_AUDIT})")
    p.add_argument(
        "--system-prompt",
        default=None,
        metavar="FILE",
        help="the agent's system prompt, shown in model calls",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="the agent's context budget, to show what it dropped",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.set_defaults(handler=run_inspect)
    return p


def build_app(args: argparse.Namespace) -> tuple[Any, str]:
    """The app and the sign-in link for these arguments (no server started)."""
    if not (args.store or args.ltm or args.mem0 or args.workdir):
        raise UserError("give at least one of --store URL, --ltm PATH, --mem0 DIR or --workdir DIR")
    if args.ltm and args.mem0:
        raise UserError("give --ltm PATH or --mem0 DIR, not both: the pages show one store")
    if args.tokens:
        auth: Any = args.tokens
        signin = "/signin"
    else:
        token = secrets.token_urlsafe(24)
        auth = {token: args.user}
        signin = f"/signin?token={token}"
    prompt = None
    if args.system_prompt:
        try:
            prompt = Path(args.system_prompt).read_text(encoding="utf-8")
        except OSError as exc:
            raise UserError(f"--system-prompt {args.system_prompt!r}: {exc.strerror}") from None
    app = inspector_app(vars(args), auth=auth, system_prompt=prompt, max_tokens=args.max_tokens)
    return app, signin


def inspector_app(options: Mapping[str, Any], **kwargs: Any) -> Any:
    """The inspector showing what ``options`` (:data:`SHOWN_OPTIONS`, ``None`` when not
    given) names; ``kwargs`` (``auth``, ...) go to ``create_inspector_app`` as they are."""
    from mnemoscope.inspector import create_inspector_app

    return create_inspector_app(
        store=options["store"],
        ltm=options["ltm"],
        mem0=options["mem0"],
        workdir=options["workdir"],
        audit=options["audit"],
        store_prefix=options["prefix"] or "mnemoscope",
        embedding_model=embedder_named(options["embedding"]),
        **kwargs,
    )


def embedder_named(name: str | None) -> Any:
    """The embedder ``--embedding local|hash`` names (``None``: none)."""
    if name == "hash":
        from mnemoscope.testing import HashEmbeddingModel

        return HashEmbeddingModel()
    if name == "local":
        from mnemoscope.embedding import LocalEmbeddingModel

        return LocalEmbeddingModel()
    return None


def run_inspect(args: argparse.Namespace) -> int:
    from mnemoscope._optional import require

    uvicorn = require("uvicorn", extra="inspector", feature="mnemoscope inspect")
    app, signin = build_app(args)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"mnemoscope inspector: open http://{host}:{args.port}{signin}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
