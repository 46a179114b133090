"""Lazy imports of optional dependencies with an error that names the extra."""

from __future__ import annotations

import importlib
from types import ModuleType

from mnemoscope.errors import MissingExtraError


def require(module: str, *, extra: str, feature: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``extra``.

    Example:
        ``redis = require("redis.asyncio", extra="redis", feature="RedisMemory")``
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{feature} requires the {extra!r} extra: pip install 'mnemoscope[{extra}]' "
            f"(could not import {module!r}: {exc})"
        ) from exc
