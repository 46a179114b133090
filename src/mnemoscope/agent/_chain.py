"""Composition of middleware onion hooks into one handler per phase."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from mnemoscope.middleware import AgentEvent, MiddlewareBase

Handler = Callable[[Any], AsyncIterator[AgentEvent]]


def compose(hook: str, middlewares: Sequence[MiddlewareBase], core: Handler) -> Handler:
    """The first middleware is the outermost layer; only overriding ones take part."""
    handler = core
    for mw in reversed([m for m in middlewares if m.overrides(hook)]):
        handler = _bind(getattr(mw, hook), handler)
    return handler


def _bind(hook: Callable[[Any, Handler], AsyncIterator[AgentEvent]], inner: Handler) -> Handler:
    def handler(ctx: Any) -> AsyncIterator[AgentEvent]:
        return hook(ctx, inner)

    return handler
