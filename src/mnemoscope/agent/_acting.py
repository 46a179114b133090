"""The acting phase: the tool calls of one model step, and each call's permission check.

Consecutive calls whose tools are concurrency-safe (:meth:`Toolkit.is_concurrency_safe`,
read-only tools by default) form a batch that runs at once; every other call runs alone,
after the calls before it and before the calls after it. In a batch:

* each call goes through the whole ``on_acting`` chain, in a task owned by the reply;
* permission decisions (``check_permissions``, the engine, an ``ask``) are taken one at a
  time in call order: a call decides once every earlier call of the batch has decided,
  so an ``ask_callback`` is never asked twice at once and sees the calls in order;
* the events come out in call order, as if the calls ran one after another (a call's
  events wait until the calls before it are done), and the results keep call order;
* each call has its own time limit; a timeout or an error is that call's result and the
  others run on. An exception escaping a call's chain (a middleware bug, an
  ``ask_callback`` that raises) fails the reply as it would have done serially, and the
  calls still running are cancelled; cancelling the reply cancels every call.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel

from mnemoscope.message import ToolResultBlock, ToolUseBlock
from mnemoscope.middleware import (
    ActingContext,
    AgentEvent,
    PermissionEvent,
    ReplyContext,
    ToolResultEvent,
    ToolUseEvent,
)
from mnemoscope.permission import PermissionDecision, PermissionRequest
from mnemoscope.tool import (
    ToolBase,
    ToolContext,
    Toolkit,
    describe_exception,
    must_propagate,
    permission_paths_of,
)

if TYPE_CHECKING:
    from mnemoscope.agent._agent import Agent


class _Turns:
    """The permission decisions of one batch: one at a time, in call order."""

    def __init__(self, n: int) -> None:
        self._decided = [asyncio.Event() for _ in range(n)]

    async def wait(self, index: int) -> None:
        for decided in self._decided[:index]:
            await decided.wait()

    def done(self, index: int) -> None:
        self._decided[index].set()


@dataclass
class _BatchCall(ActingContext):
    """The acting context of a call that runs in a concurrent batch."""

    turns: _Turns | None = None
    index: int = 0


async def act_step(
    agent: Agent,
    reply: ReplyContext,
    tool_uses: Sequence[ToolUseBlock],
    results: list[ToolResultBlock],
    full_outputs: dict[str, str],
) -> AsyncIterator[AgentEvent]:
    """Run the calls of one step (see the module docstring), yielding their events.

    Appends the results, in call order and bounded for the model, to ``results``; the
    full text of a cut one goes to ``full_outputs`` under its position.
    """
    max_chars = agent._output_chars(len(tool_uses))

    def finish(actx: ActingContext) -> ToolResultEvent:
        assert actx.result is not None
        # what reaches the model is bounded; the cut text is stored, not sent
        result, full = agent.toolkit.limit_output(actx.result, max_chars)
        if full is not None:
            full_outputs[str(len(results))] = full
        results.append(result)
        return ToolResultEvent(reply_id=reply.reply_id, result=result)

    for concurrent, batch in _batches(agent.toolkit, tool_uses):
        if concurrent:
            async for event in _run_batch(agent, reply, batch, finish):
                yield event
            continue
        for tool_use in batch:
            yield ToolUseEvent(reply_id=reply.reply_id, tool_use=tool_use)
            actx = ActingContext(reply=reply, tool_use=tool_use)
            async for event in agent._acting_chain(actx):
                yield event
            yield finish(actx)


def _batches(
    toolkit: Toolkit, tool_uses: Sequence[ToolUseBlock]
) -> list[tuple[bool, list[ToolUseBlock]]]:
    """``(concurrent, calls)`` groups: runs of two or more safe calls run at once."""
    groups: list[tuple[bool, list[ToolUseBlock]]] = []
    for tool_use in tool_uses:
        safe = toolkit.is_concurrency_safe(tool_use)
        if safe and groups and groups[-1][0]:
            groups[-1][1].append(tool_use)
        else:
            groups.append((safe, [tool_use]))
    # a lone safe call gains nothing from a task; unsafe calls run one by one
    return [(safe and len(calls) > 1, calls) for safe, calls in groups]


async def _run_batch(
    agent: Agent,
    reply: ReplyContext,
    batch: list[ToolUseBlock],
    finish: Callable[[ActingContext], ToolResultEvent],
) -> AsyncIterator[AgentEvent]:
    turns = _Turns(len(batch))
    wake = asyncio.Event()
    calls = [
        _BatchCall(reply=reply, tool_use=tool_use, turns=turns, index=i)
        for i, tool_use in enumerate(batch)
    ]
    buffers: list[deque[AgentEvent]] = [deque() for _ in batch]
    # tasks of the reply: the reply's end cancels them even if this generator is dropped
    tasks = [
        reply.spawn(
            _drive(agent, actx, buffers[i], wake, turns),
            name=f"mnemoscope-tool-{actx.tool_use.name}-{actx.tool_use.id}",
        )
        for i, actx in enumerate(calls)
    ]
    try:
        for actx, buffer, task in zip(calls, buffers, tasks, strict=True):
            yield ToolUseEvent(reply_id=reply.reply_id, tool_use=actx.tool_use)
            while True:
                while buffer:
                    yield buffer.popleft()
                if task.done():
                    break
                wake.clear()
                await wake.wait()
            task.result()  # an exception that escaped the call's chain fails the reply
            yield finish(actx)
    finally:
        running = [t for t in tasks if not t.done()]
        for t in running:
            t.cancel()
        if running:
            await asyncio.wait(running)
        for t in tasks:
            if t.done() and not t.cancelled():
                t.exception()  # retrieved: no "exception was never retrieved" noise


async def _drive(
    agent: Agent,
    actx: _BatchCall,
    buffer: deque[AgentEvent],
    wake: asyncio.Event,
    turns: _Turns,
) -> None:
    try:
        async for event in agent._acting_chain(actx):
            buffer.append(event)
            wake.set()
    finally:
        turns.done(actx.index)  # also when a middleware answered without the core
        wake.set()


async def acting_core(agent: Agent, ctx: ActingContext) -> AsyncIterator[AgentEvent]:
    """Validate, decide permission, execute; the result lands in ``ctx.result``."""
    tool_use = ctx.tool_use
    prepared = agent.toolkit.prepare(tool_use)
    if isinstance(prepared, ToolResultBlock):
        ctx.result = prepared
        return
    tool, tool_input = prepared
    ctx.tool = tool
    perm = agent.state.permission_context
    tool_ctx = ToolContext(
        tool_use_id=tool_use.id,
        permission_context=perm,
        reply_id=ctx.reply.reply_id,
        emit=ctx.reply.emit,
        stored_messages=lambda mark: agent.memory.get(marks=mark),
        recall=functools.partial(agent.context.recall, exclude=ctx.reply.input.id),
        compact=functools.partial(agent.context.compact_now, ctx.reply),
        state=agent.state.tool_state,
    )
    turns, index = (ctx.turns, ctx.index) if isinstance(ctx, _BatchCall) else (None, 0)
    if turns is not None:
        await turns.wait(index)
    try:
        decided = await _decide(agent, tool, tool_input, tool_use, tool_ctx)
    finally:
        if turns is not None:
            turns.done(index)
    if isinstance(decided, ToolResultBlock):
        ctx.result = decided
        return
    decision, approved = decided
    if decision.behavior != "allow":
        asked = decision.behavior == "ask"
        yield PermissionEvent(
            reply_id=ctx.reply.reply_id,
            tool_use_id=tool_use.id,
            tool_name=tool.name,
            behavior=decision.behavior,
            approved=approved if asked else None,
            message=decision.message,
        )
        if not (asked and approved):
            if asked:
                why = (
                    "the user declined"
                    if perm.ask_callback
                    else "no one is available to approve it"
                )
                output = (
                    f"Permission needed: {decision.message} The call was not run because {why}. "
                    "Do not retry it; tell the user what you wanted to do."
                )
            else:
                output = f"Permission denied: {decision.message}"
            ctx.result = ToolResultBlock(
                id=tool_use.id, name=tool.name, state="denied", output=output
            )
            return
    ctx.result = await agent.toolkit.execute(tool, tool_input, tool_use, tool_ctx)


async def _decide(
    agent: Agent,
    tool: ToolBase,
    tool_input: BaseModel,
    tool_use: ToolUseBlock,
    tool_ctx: ToolContext,
) -> tuple[PermissionDecision, bool] | ToolResultBlock:
    """The decision on one call and, for an ``ask``, whether it was approved; or the
    error result when the tool's own permission code failed (the call is not run)."""
    perm = agent.state.permission_context
    try:
        # tool code (check_permissions, permission_paths) must not crash the reply
        decision = await tool.check_permissions(tool_input, tool_ctx)
        paths = permission_paths_of(tool, tool_input, tool_ctx)
        if decision is None:
            decision = perm.decide(
                tool.name,
                is_read_only=tool.is_read_only,
                auto_allow=tool.auto_allow,
                paths=[(pa.path, pa.access) for pa in paths],
            )
    except BaseException as exc:
        if must_propagate(exc):
            raise
        return ToolResultBlock(
            id=tool_use.id,
            name=tool.name,
            state="error",
            output=(
                f"The permission check of {tool.name} failed ({describe_exception(exc)}), "
                "so the call was not run."
            ),
        )
    approved = False
    if decision.behavior == "ask" and perm.ask_callback is not None:
        request = PermissionRequest(
            tool_name=tool.name,
            tool_input=tool_use.input,
            paths=[pa.path for pa in paths],
            message=decision.message,
        )
        approved = bool(await perm.ask_callback(request))
    return decision, approved
