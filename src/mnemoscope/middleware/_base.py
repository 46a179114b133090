"""The middleware contract.

Onion hooks wrap a phase of the agent loop. Each takes its typed context and
``next_handler`` and is an async generator: it yields the events of the inner layers
(possibly adding its own) and may act before and after calling ``next_handler``::

    class Timing(MiddlewareBase):
        async def on_model_call(self, ctx, next_handler):
            started = time.perf_counter()
            async for event in next_handler(ctx):
                yield event
            print("model call took", time.perf_counter() - started)

Only the hooks a subclass overrides run (found once, at agent construction).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from mnemoscope.events import AgentEvent
from mnemoscope.middleware._context import (
    ActingContext,
    ModelCallContext,
    ReasoningContext,
    ReplyContext,
)

if TYPE_CHECKING:
    from mnemoscope.context import CompactionContext
    from mnemoscope.middleware._view import AgentView
    from mnemoscope.tool import ToolBase

ReplyHandler = Callable[[ReplyContext], AsyncIterator[AgentEvent]]
ReasoningHandler = Callable[[ReasoningContext], AsyncIterator[AgentEvent]]
ActingHandler = Callable[[ActingContext], AsyncIterator[AgentEvent]]
ModelCallHandler = Callable[[ModelCallContext], AsyncIterator[AgentEvent]]
CompressHandler = Callable[["CompactionContext"], AsyncIterator[AgentEvent]]

HOOK_NAMES = (
    "on_reply",
    "on_reasoning",
    "on_acting",
    "on_model_call",
    "on_compress_context",
    "on_system_prompt",
    "system_prompt_changed",
)


class MiddlewareBase:
    """Base class of agent middleware; override only the hooks you need."""

    # ----------------------------------------------------------- lifecycle
    def setup(self, agent: AgentView) -> None:
        """Called once when an agent is constructed with this middleware.

        Use it to check configuration against the agent (raise
        :class:`~mnemoscope.errors.UserError`) or to grant permissions for resources the
        middleware owns.
        """

    async def list_tools(self) -> list[ToolBase]:
        """Tools this middleware offers; pass them to the agent's ``Toolkit``."""
        return []

    async def aclose(self) -> None:
        """Flush background work and release resources. Safe to call twice."""

    # ----------------------------------------------------------- onion hooks
    async def on_reply(
        self, ctx: ReplyContext, next_handler: ReplyHandler
    ) -> AsyncIterator[AgentEvent]:
        async for event in next_handler(ctx):
            yield event

    async def on_reasoning(
        self, ctx: ReasoningContext, next_handler: ReasoningHandler
    ) -> AsyncIterator[AgentEvent]:
        async for event in next_handler(ctx):
            yield event

    async def on_acting(
        self, ctx: ActingContext, next_handler: ActingHandler
    ) -> AsyncIterator[AgentEvent]:
        async for event in next_handler(ctx):
            yield event

    async def on_model_call(
        self, ctx: ModelCallContext, next_handler: ModelCallHandler
    ) -> AsyncIterator[AgentEvent]:
        async for event in next_handler(ctx):
            yield event

    async def on_compress_context(
        self, ctx: CompactionContext, next_handler: CompressHandler
    ) -> AsyncIterator[AgentEvent]:
        """Wraps one compaction (as AgentScope 2's hook): edit ``ctx.msgs`` to compact
        less, set ``ctx.summary_text`` to write the summary yourself, or do not call
        ``next_handler`` to skip it. Failures here are compaction failures: nothing is
        lost and the budget drops history instead."""
        async for event in next_handler(ctx):
            yield event

    # ------------------------------------------------------- system prompt
    async def on_system_prompt(self, ctx: ReplyContext, prompt: str) -> str:
        """Transform the system prompt. Called once per reply, and again before a
        reasoning step only when some middleware's :meth:`system_prompt_changed` is true.
        """
        return prompt

    async def system_prompt_changed(self, ctx: ReplyContext) -> bool:
        """Whether this middleware's contribution changed since it was last built."""
        return False

    # ------------------------------------------------------------- helpers
    def overrides(self, hook: str) -> bool:
        """Whether this instance's class overrides ``hook``."""
        return getattr(type(self), hook) is not getattr(MiddlewareBase, hook)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
