"""Small helpers shared by the ``mnemoscope`` subcommands: counts, progress, usage errors,
closing what a command opened."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from mnemoscope.errors import CLIUsageError


class _Closable(Protocol):
    async def aclose(self) -> None: ...


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
