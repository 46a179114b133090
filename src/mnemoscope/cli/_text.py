"""Small helpers shared by the ``mnemoscope`` subcommands: the subcommands of a command
group, counts, progress, usage errors, closing what a command opened."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from mnemoscope.errors import CLIUsageError


class _Closable(Protocol):
    async def aclose(self) -> None: ...


class Subcommands:
    """A command group (``ltm``, ``memory``) whose subcommands share the group's options
    and name a location (a store file, a workdir) positionally or by flag.

    The chosen subcommand's name is stored as ``<group>_command``, its handler as
    ``<group>_handler`` and a location given positionally as ``location``. Declare the
    location (:meth:`location`) and the shared options (:meth:`option`) before the
    subcommands (:meth:`add`).

    Args:
        subparsers: the ``mnemoscope`` parser's subcommands.
        name: the group's name.
        help: the group's help line.

    Attributes:
        parser: the group's parser.
    """

    def __init__(self, subparsers: Any, name: str, *, help: str) -> None:
        self.parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help)
        self._sub = self.parser.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")
        self._common = argparse.ArgumentParser(add_help=False)
        self._handler_key = f"{name}_handler"
        self._metavar = "LOCATION"

    def location(self, metavar: str, flag: str, *, help: str) -> None:
        """The location: ``metavar`` in usage lines, ``flag`` as an option of the group.

        A subcommand added with ``location=True`` also takes it positionally;
        :func:`merge_location` reconciles the two.
        """
        self._metavar = metavar
        self.option(flag, help=help)

    def option(self, *flags: str, **kwargs: Any) -> None:
        """An option of the group, accepted before the subcommand and after it.

        It has no default (``args`` lacks it when it is not given: read it with
        ``getattr(args, name, None)``), so a value given before the subcommand is not
        reset by the subcommand's own parser.
        """
        self.parser.add_argument(*flags, default=argparse.SUPPRESS, **kwargs)
        self._common.add_argument(*flags, default=argparse.SUPPRESS, **kwargs)

    def add(
        self,
        name: str,
        handler: Callable[..., Any],
        help: str,
        *,
        location: bool = False,
        words: str | None = None,
        words_help: str | None = None,
        common: bool = True,
        **kwargs: Any,
    ) -> argparse.ArgumentParser:
        """Add subcommand ``name`` run by ``handler``.

        Args:
            location: it takes the location as an optional positional.
            words: it takes ``[LOCATION] WORDS...`` in ``args.words`` (``"QUERY"``): the
                location may come first or last (see :func:`pick_location`).
            words_help: the help of those positionals.
            common: it takes the group's options.
            kwargs: passed to ``add_parser`` (``usage``, ``description``).
        """
        parents = [self._common] if common else []
        parser = self._sub.add_parser(name, help=help, parents=parents, **kwargs)
        if location:
            parser.add_argument("location", nargs="?", metavar=self._metavar)
        if words:
            metavar = f"[{self._metavar}] {words}"
            parser.add_argument("words", nargs="+", metavar=metavar, help=words_help)
        parser.set_defaults(**{self._handler_key: handler})
        return parser


_PLURALS = {"memory": "memories", "entry": "entries", "memory file": "memory files"}


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``"1 memory"``, ``"3 memories"``, ``"0 problems"``."""
    if count == 1:
        return f"{count} {singular}"
    return f"{count} {plural_form or _PLURALS.get(singular, singular + 's')}"


def progress(message: str) -> None:
    """Say on stderr what a slow step is doing (stdout stays the command's result)."""
    print(message, file=sys.stderr, flush=True)


def pick_location(
    items: Sequence[str], is_location: Callable[[str], bool]
) -> tuple[str | None, list[str]]:
    """Split ``[LOCATION] ARGS...`` or ``ARGS... LOCATION`` (two or more positionals).

    The first positional is the location (a store file, a workdir) when
    ``is_location`` says so, else the last one; with a single positional there is no
    location (it is the query, the name, the id).
    """
    rest = list(items)
    if len(rest) >= 2:
        for index in (0, len(rest) - 1):
            if is_location(rest[index]):
                return rest.pop(index), rest
    return None, rest


def merge_location(positional: str | None, flag_value: str | None, flag: str) -> str | None:
    """The location given positionally or with ``flag``; both at once must agree."""
    both = positional is not None and flag_value is not None
    if both and os.path.abspath(str(positional)) != os.path.abspath(str(flag_value)):
        raise CLIUsageError(
            f"give the location once: {positional!r} or {flag} {flag_value!r}, not both"
        )
    return positional if positional is not None else flag_value


async def aclose_all(*resources: _Closable | None) -> None:
    """Close what a command opened, in the order given; a ``None`` (never opened) is
    passed over."""
    for resource in resources:
        if resource is not None:
            await resource.aclose()
