"""Names a package exports without importing them until first use (PEP 562).

A package whose public names pull in an optional extra (an SDK, a database driver, a web
framework) lists them here instead of importing them, so importing the package stays cheap::

    from typing import TYPE_CHECKING

    from mnemoscope._lazy import lazy_exports

    if TYPE_CHECKING:  # what type checkers and IDEs see; mirrors the table below
        from mnemoscope.model._openai import OpenAIChatModel

    __getattr__, __dir__ = lazy_exports(__name__, {"OpenAIChatModel": "mnemoscope.model._openai"})

``tests/core/test_lazy_exports.py`` checks that every package's table and its
``TYPE_CHECKING`` block name the same things.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package with lazy names.

    Args:
        package: the package's ``__name__``.
        homes: each lazy name and the module that defines it.

    Returns:
        ``(__getattr__, __dir__)``: the first imports a name's home on first access (later
        accesses find it in ``sys.modules``); an unknown name raises ``AttributeError`` as
        for any module. The value is not bound in the package, so a home module that is
        removed from ``sys.modules`` and imported again (as the missing-extra tests do) is
        what the next access sees. The second lists the lazy names with the bound ones, so
        ``dir()`` and completion see them before first use.
    """
    table = dict(homes)

    def load(name: str) -> Any:
        home = table.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    def names() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return load, names


__all__ = ["lazy_exports"]
