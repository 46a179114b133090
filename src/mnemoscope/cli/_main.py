"""The ``mnemoscope`` command.

Subcommands: ``chat`` (talk to a configured model), ``demo`` (offline scripted run),
``memory`` (inspect agentic Markdown memory), ``ltm`` (inspect a native long-term store).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mnemoscope", description="Context and memory for LLM agents."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from mnemoscope.cli._chat import add_chat_parser

    add_chat_parser(sub)
    demo = sub.add_parser("demo", help="run an offline, scripted demo that shows every step")
    demo.add_argument(
        "--workdir", default=None, help="where the demo keeps its memory (default: a temp dir)"
    )
    demo.set_defaults(handler=_run_demo)
    # subcommands owned by the memory modules
    for module, adder in (
        ("mnemoscope.cli._memory", "add_memory_parser"),
        ("mnemoscope.cli._ltm", "add_ltm_parser"),
    ):
        getattr(importlib.import_module(module), adder)(sub)
    return parser


def _run_demo(args: argparse.Namespace) -> int:
    from mnemoscope.cli._demo import run_demo

    return asyncio.run(run_demo(sys.stdout, workdir=args.workdir)) or 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    result = handler(args)
    return int(result or 0)
