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
from typing import TYPE_CHECKING, TypeVar

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
    # The defaults only pass the inner layers' events through (the agent skips hooks a
    # subclass does not override, so they run only when a subclass calls super()).
    def on_reply(self, ctx: ReplyContext, next_handler: ReplyHandler) -> AsyncIterator[AgentEvent]:
        """Wraps one whole reply, from loading the history to the final message."""
        return _pass_through(ctx, next_handler)

    def on_reasoning(
        self, ctx: ReasoningContext, next_handler: ReasoningHandler
    ) -> AsyncIterator[AgentEvent]:
        """Wraps one reasoning step: building the model input, the call, its message."""
        return _pass_through(ctx, next_handler)

    def on_acting(
        self, ctx: ActingContext, next_handler: ActingHandler
    ) -> AsyncIterator[AgentEvent]:
        """Wraps one tool call; set ``ctx.result`` without calling ``next_handler`` to
        answer it yourself."""
        return _pass_through(ctx, next_handler)

    def on_model_call(
        self, ctx: ModelCallContext, next_handler: ModelCallHandler
    ) -> AsyncIterator[AgentEvent]:
        """Wraps one model call; ``ctx.messages``, ``ctx.tools`` and ``ctx.tool_choice``
        are the exact input and may be edited before ``next_handler``."""
        return _pass_through(ctx, next_handler)

    def on_compress_context(
        self, ctx: CompactionContext, next_handler: CompressHandler
    ) -> AsyncIterator[AgentEvent]:
        """Wraps one compaction (as AgentScope 2's hook): edit ``ctx.msgs`` to compact
        less, set ``ctx.summary_text`` to write the summary yourself, or do not call
        ``next_handler`` to skip it. Failures here are compaction failures: nothing is
        lost and the budget drops history instead."""
        return _pass_through(ctx, next_handler)

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


_C = TypeVar("_C")


async def _pass_through(
    ctx: _C, next_handler: Callable[[_C], AsyncIterator[AgentEvent]]
) -> AsyncIterator[AgentEvent]:
    async for event in next_handler(ctx):
        yield event
