"""Typed context objects handed to middleware hooks.

A :class:`ReplyContext` lives for exactly one ``reply``/``reply_stream`` call. Middleware
keeps its per-reply state in ``ctx.state_for(self, MyState)`` (never on the middleware
instance), and starts background work with ``ctx.spawn(...)`` so that the task belongs to the reply
and is cancelled when the reply ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from mnemoscope.events import AgentEvent
from mnemoscope.message import HintBlock, Msg, ToolResultBlock, ToolUseBlock, new_id
from mnemoscope.model import ChatResponse, ToolChoice, ToolSchema

if TYPE_CHECKING:
    from mnemoscope.middleware._view import AgentView
    from mnemoscope.tool import ToolBase

_T = TypeVar("_T")
_S = TypeVar("_S")

ExitReason = Literal["done", "max_iters", "error", "cancelled"]


@dataclass
class ReplyContext:
    """One reply.

    Attributes:
        agent: the agent replying.
        input: the user message this reply answers.
        history: short-term history loaded at the start of the reply (before ``input``).
        transcript: messages produced during this reply (assistant, tool results, hints),
            in order; they are written to short-term memory as they complete.
        injected: transient context for this reply only (e.g. retrieved memories as an
            ``AssistantMsg(name="memory")``); shown to the model, never stored.
        result: the final reply message, set when the loop ends.
        exit_reason: why the loop ended (``None`` while running).
    """

    agent: AgentView
    input: Msg
    reply_id: str = field(default_factory=new_id)
    history: list[Msg] = field(default_factory=list)
    transcript: list[Msg] = field(default_factory=list)
    injected: list[Msg] = field(default_factory=list)
    system_prompt: str | None = None
    result: Msg | None = None
    exit_reason: ExitReason | None = None
    pending_hints: list[HintBlock] = field(default_factory=list)
    _state: dict[tuple[int, object], Any] = field(default_factory=dict, init=False, repr=False)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set, init=False, repr=False)
    _events: list[AgentEvent] = field(default_factory=list, init=False, repr=False)

    @overload
    def state_for(self, owner: object) -> dict[str, Any]: ...
    @overload
    def state_for(self, owner: object, factory: Callable[[], _S]) -> _S: ...
    def state_for(self, owner: object, factory: Callable[[], Any] | None = None) -> Any:
        """Per-reply state of one middleware (keyed by identity), made on first use.

        With a ``factory`` (usually a dataclass) the state is that object, typed::

            @dataclass
            class _Seen:
                files: set[str] = field(default_factory=set)

            seen = ctx.state_for(self, _Seen)   # a _Seen, the same one for this reply

        Without one it is a ``dict[str, Any]``. The factory is part of the key, so asking
        with a factory never returns the dict, nor an object another factory made: pass a
        class or a module-level function, not a lambda made anew on every call.
        """
        key = (id(owner), factory)
        if key not in self._state:
            self._state[key] = {} if factory is None else factory()
        return self._state[key]

    def spawn(self, coro: Coroutine[Any, Any, _T], *, name: str | None = None) -> asyncio.Task[_T]:
        """Start a task owned by this reply; unfinished ones are cancelled at its end."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def add_hint(self, hint: HintBlock) -> None:
        """Queue a hint; it is injected before the next model call of this reply."""
        self.pending_hints.append(hint)

    def emit(self, event: AgentEvent) -> None:
        """Queue an event for the reply stream (delivered at the next yield point)."""
        event.reply_id = self.reply_id
        self._events.append(event)

    def drain_events(self) -> list[AgentEvent]:
        events, self._events = self._events, []
        return events

    async def cancel_tasks(self) -> None:
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class ReasoningContext:
    """One reasoning step (one model call plus its bookkeeping)."""

    reply: ReplyContext
    iteration: int
    response: ChatResponse | None = None
    msg: Msg | None = None


@dataclass
class ModelCallContext:
    """The exact model input of one call; middleware may edit it before ``next_handler``."""

    reply: ReplyContext
    messages: list[Msg]
    tools: list[ToolSchema]
    tool_choice: ToolChoice | None = None
    response: ChatResponse | None = None


@dataclass
class ActingContext:
    """One tool call."""

    reply: ReplyContext
    tool_use: ToolUseBlock
    tool: ToolBase | None = None
    result: ToolResultBlock | None = None
