"""ReplyContext.exit_reason tells an on_reply middleware how the reply ended."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from mnemoscope.agent import Agent
from mnemoscope.errors import ModelCallError
from mnemoscope.middleware import AgentEvent, MiddlewareBase, ReplyContext
from mnemoscope.testing import ScriptedChatModel


class Seen(MiddlewareBase):
    def __init__(self) -> None:
        self.reasons: list[str | None] = []

    async def on_reply(self, ctx: ReplyContext, next_handler) -> AsyncIterator[AgentEvent]:  # type: ignore[no-untyped-def]
        try:
            async for event in next_handler(ctx):
                yield event
        finally:
            self.reasons.append(ctx.exit_reason)


async def test_a_failed_reply_ends_with_error_not_cancelled() -> None:
    seen = Seen()
    agent = Agent(
        name="a", system_prompt="s", model=ScriptedChatModel(), middlewares=[seen]
    )  # no responses queued
    with pytest.raises(ModelCallError):
        await agent.reply("hi")
    assert seen.reasons == ["error"]


async def test_a_cancelled_reply_ends_with_cancelled() -> None:
    async def slow(*_args: object) -> str:
        await asyncio.sleep(30)
        return "late"

    seen = Seen()
    agent = Agent(name="a", system_prompt="s", model=ScriptedChatModel([slow]), middlewares=[seen])
    task = asyncio.create_task(agent.reply("hi"))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen.reasons == ["cancelled"]


async def test_a_finished_reply_ends_with_done() -> None:
    seen = Seen()
    agent = Agent(
        name="a", system_prompt="s", model=ScriptedChatModel(["hello"]), middlewares=[seen]
    )
    await agent.reply("hi")
    assert seen.reasons == ["done"]


def test_reply_context_keeps_its_bookkeeping_out_of_init_and_repr() -> None:
    from mnemoscope.message import UserMsg

    agent = Agent(name="a", system_prompt="s", model=ScriptedChatModel())
    ctx = ReplyContext(agent=agent, input=UserMsg("u", "hi"))
    assert "_state" not in repr(ctx) and "_tasks" not in repr(ctx)
    with pytest.raises(TypeError):
        ReplyContext(agent=agent, input=UserMsg("u", "hi"), _state={})  # type: ignore[call-arg]
