"""The command-group helper behind ``mnemoscope ltm`` and ``mnemoscope memory``."""

from __future__ import annotations

import argparse

import pytest

from mnemoscope.cli._text import Subcommands, merge_location
from mnemoscope.errors import CLIUsageError


def _handler(args: argparse.Namespace) -> int:
    return 0


def _parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tool")
    subs = Subcommands(root.add_subparsers(dest="command"), "grp", help="a group")
    subs.location("STORE", "--db", help="the store")
    subs.option("--user", help="the user")
    subs.add("ls", _handler, "list", location=True)
    subs.add("search", _handler, "search", words="QUERY")
    return root


def test_a_group_option_is_kept_before_and_after_the_subcommand() -> None:
    before = _parser().parse_args(["grp", "--user", "alice", "ls"])
    after = _parser().parse_args(["grp", "ls", "--user", "alice"])
    assert before.user == after.user == "alice"
    assert before.grp_command == "ls"
    assert before.grp_handler is _handler
    assert not hasattr(_parser().parse_args(["grp", "ls"]), "user")


def test_the_location_is_positional_or_a_flag_but_not_two_different_ones() -> None:
    args = _parser().parse_args(["grp", "ls", "a.db"])
    assert merge_location(args.location, getattr(args, "db", None), "--db") == "a.db"
    args = _parser().parse_args(["grp", "--db", "b.db", "ls"])
    assert merge_location(getattr(args, "location", None), args.db, "--db") == "b.db"
    args = _parser().parse_args(["grp", "ls", "a.db", "--db", "b.db"])
    with pytest.raises(CLIUsageError, match="give the location once"):
        merge_location(args.location, args.db, "--db")


def test_words_name_the_location_in_usage() -> None:
    args = _parser().parse_args(["grp", "search", "a.db", "where", "now"])
    assert args.words == ["a.db", "where", "now"]
    sub = _parser()._subparsers._group_actions[0].choices["grp"]  # type: ignore[union-attr]
    search = sub._subparsers._group_actions[0].choices["search"]  # type: ignore[union-attr]
    assert "[STORE] QUERY" in search.format_usage()
