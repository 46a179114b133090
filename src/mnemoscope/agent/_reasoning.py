"""The reasoning phase: system prompt, hints, context, one model call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from mnemoscope.message import Msg, UserMsg
from mnemoscope.middleware import (
    AgentEvent,
    HintInjectedEvent,
    ModelCallContext,
    ReasoningContext,
    TextDeltaEvent,
    ThinkingDeltaEvent,
)

if TYPE_CHECKING:
    from mnemoscope.agent._agent import Agent

HINT_MARK = "hint"


async def reasoning_core(agent: Agent, ctx: ReasoningContext) -> AsyncIterator[AgentEvent]:
    reply = ctx.reply
    await agent._ensure_system_prompt(reply)
    if reply.pending_hints:
        hints, reply.pending_hints = reply.pending_hints, []
        hint_msg = UserMsg("hint", list(hints))
        reply.transcript.append(hint_msg)
        await agent.memory.add(hint_msg, marks=HINT_MARK)
        for hint in hints:
            yield HintInjectedEvent(reply_id=reply.reply_id, hint=hint)
    built, context_event = agent.context.build(reply, ctx.iteration)
    yield context_event  # every call reports its context's composition

    mctx = ModelCallContext(reply=reply, messages=built.messages, tools=agent.toolkit.schemas())
    async for event in agent._model_call_chain(mctx):
        yield event
    assert mctx.response is not None, "the model-call chain ended without a response"
    ctx.response = mctx.response
    ctx.msg = Msg(
        name=agent.name,
        role="assistant",
        content=mctx.response.content,
        metadata={"usage": mctx.response.usage.model_dump()} if mctx.response.usage else {},
    )


async def model_call_core(agent: Agent, ctx: ModelCallContext) -> AsyncIterator[AgentEvent]:
    reply_id = ctx.reply.reply_id
    async for chunk in agent.model.stream_chunks(ctx.messages, ctx.tools or None, ctx.tool_choice):
        if chunk.kind == "text":
            yield TextDeltaEvent(reply_id=reply_id, delta=chunk.delta)
        elif chunk.kind == "thinking":
            yield ThinkingDeltaEvent(reply_id=reply_id, delta=chunk.delta)
        elif chunk.final is not None:
            ctx.response = chunk.final
