"""The ``mnemoscope`` command (also ``python -m mnemoscope``).

Subcommands: ``chat`` (talk to a configured model), ``demo`` (offline scripted run),
``memory`` (inspect agentic Markdown memory), ``ltm`` (inspect a native long-term store),
``serve`` (run agents as an HTTP service), ``inspect`` (serve the inspector web page).

A user error (a :class:`~mnemoscope.errors.MnemoscopeError`: a bad path, a missing extra,
a store built with another embedder) prints one line, ``mnemoscope <command>: error:
<what and the fix>``, and exits with status 2; ``--debug`` (anywhere on the command line,
or ``MNEMOSCOPE_DEBUG=1``) prints the traceback instead.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from mnemoscope.errors import MnemoscopeError

DEBUG_ENV = "MNEMOSCOPE_DEBUG"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mnemoscope")
    except PackageNotFoundError:  # running from a source tree that is not installed
        from mnemoscope._version import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mnemoscope", description="Context and memory for LLM agents."
    )
    parser.add_argument("--version", action="version", version=f"mnemoscope {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of an error (also anywhere after the command, or ${DEBUG_ENV}=1)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from mnemoscope.cli._chat import add_chat_parser

    add_chat_parser(sub)
    demo = sub.add_parser(
        "demo",
        help="run an offline demo (scripted model) of the three memory layers",
        description="Run an offline demo: a scripted model (no LLM, no key) drives real "
        "memory layers: an SQLite session, agentic Markdown memory and the native "
        "long-term store. Run it twice with the same --workdir to see everything resumed.",
    )
    demo.add_argument(
        "--workdir", default=None, help="where the demo keeps its memory (default: a temp dir)"
    )
    demo.set_defaults(handler=_run_demo)
    # subcommands owned by the memory modules
    for module, adder in (
        ("mnemoscope.cli._memory", "add_memory_parser"),
        ("mnemoscope.cli._ltm", "add_ltm_parser"),
        ("mnemoscope.cli._serve", "add_serve_parser"),
        ("mnemoscope.cli._inspect", "add_inspect_parser"),
    ):
        getattr(importlib.import_module(module), adder)(sub)
    return parser


def _run_demo(args: argparse.Namespace) -> int:
    from mnemoscope.cli._demo import run_demo

    return asyncio.run(run_demo(sys.stdout, workdir=args.workdir)) or 0


def _command_name(args: argparse.Namespace) -> str:
    parts = ["mnemoscope"]
    for key in ("command", "ltm_command", "memory_command"):
        value = getattr(args, key, None)
        if value:
            parts.append(value)
    return " ".join(parts)


def _split_debug(argv: list[str]) -> tuple[list[str], bool]:
    """Take ``--debug`` out wherever it is (before a ``--``), so it works after a subcommand."""
    if "--" in argv:
        cut = argv.index("--")
        head, tail = argv[:cut], argv[cut:]
    else:
        head, tail = argv, []
    debug = "--debug" in head
    return [a for a in head if a != "--debug"] + tail, debug


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    raw, debug = _split_debug(raw)
    debug = debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    parser = build_parser()
    args = parser.parse_args(raw)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        result = handler(args)
    except MnemoscopeError as exc:
        if debug:
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{_command_name(args)}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{_command_name(args)}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)
