"""Hook order across middlewares, per-reply state, system prompt stability."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from mnemoscope.agent import Agent
from mnemoscope.message import AssistantMsg, HintBlock
from mnemoscope.middleware import (
    ActingContext,
    AgentEvent,
    HintInjectedEvent,
    MemoryEvent,
    MiddlewareBase,
    ModelCallContext,
    ReasoningContext,
    ReplyContext,
)
from mnemoscope.testing import ScriptedCall, ScriptedChatModel, tool_call
from mnemoscope.tool import Toolkit


def echo(text: str) -> str:
    """Echo.

    Args:
        text: what to echo.
    """
    return text


class Recorder(MiddlewareBase):
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    async def on_reply(self, ctx: ReplyContext, next_handler) -> AsyncIterator[AgentEvent]:  # type: ignore[no-untyped-def, override]
        self.log.append(f"{self.name}:reply:before")
        async for event in next_handler(ctx):
            yield event
        self.log.append(f"{self.name}:reply:after")

    async def on_reasoning(self, ctx: ReasoningContext, next_handler) -> AsyncIterator[AgentEvent]:  # type: ignore[no-untyped-def, override]
        self.log.append(f"{self.name}:reasoning:{ctx.iteration}")
        async for event in next_handler(ctx):
            yield event

    async def on_acting(self, ctx: ActingContext, next_handler) -> AsyncIterator[AgentEvent]:  # type: ignore[no-untyped-def, override]
        self.log.append(f"{self.name}:acting:{ctx.tool_use.name}")
        async for event in next_handler(ctx):
            yield event
        self.log.append(f"{self.name}:acted:{ctx.result.state if ctx.result else None}")

    async def on_model_call(self, ctx: ModelCallContext, next_handler) -> AsyncIterator[AgentEvent]:  # type: ignore[no-untyped-def, override]
        self.log.append(f"{self.name}:model")
        async for event in next_handler(ctx):
            yield event


async def test_hooks_run_as_an_onion_first_middleware_outermost() -> None:
    log: list[str] = []
    model = ScriptedChatModel([tool_call("echo", text="x"), "done"])
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit([echo]),
        middlewares=[Recorder("outer", log), Recorder("inner", log)],
    )
    await agent.reply("go")
    assert log == [
        "outer:reply:before",
        "inner:reply:before",
        "outer:reasoning:1",
        "inner:reasoning:1",
        "outer:model",
        "inner:model",
        "outer:acting:echo",
        "inner:acting:echo",
        "inner:acted:success",
        "outer:acted:success",
        "outer:reasoning:2",
        "inner:reasoning:2",
        "outer:model",
        "inner:model",
        "inner:reply:after",
        "outer:reply:after",
    ]


def test_only_overridden_hooks_take_part() -> None:
    class OnlyPrompt(MiddlewareBase):
        async def on_system_prompt(self, ctx: ReplyContext, prompt: str) -> str:
            return prompt + "!"

    mw = OnlyPrompt()
    assert mw.overrides("on_system_prompt")
    assert not mw.overrides("on_reply") and not mw.overrides("on_model_call")


class PerReplyState(MiddlewareBase):
    """Keeps the user's text in per-reply state and injects it back later."""

    async def on_reply(self, ctx: ReplyContext, next_handler) -> AsyncIterator[AgentEvent]:  # type: ignore[no-untyped-def, override]
        ctx.state_for(self)["owner"] = ctx.input.get_text_content()
        ctx.injected.append(AssistantMsg("memory", f"memory for {ctx.input.get_text_content()}"))
        async for event in next_handler(ctx):
            yield event
        ctx.emit(MemoryEvent(source="test", action="write", message=ctx.state_for(self)["owner"]))

    async def on_reasoning(self, ctx: ReasoningContext, next_handler) -> AsyncIterator[AgentEvent]:  # type: ignore[no-untyped-def, override]
        await asyncio.sleep(0.01)  # let the other reply interleave
        ctx.reply.add_hint(HintBlock(hint=f"hint for {ctx.reply.state_for(self)['owner']}"))
        async for event in next_handler(ctx):
            yield event


async def test_concurrent_replies_through_one_middleware_do_not_share_state() -> None:
    mw = PerReplyState()

    async def answer(call: ScriptedCall) -> str:
        await asyncio.sleep(0.02)
        user = next(m for m in reversed(call.messages) if m.name == "user")
        return f"answer to {user.get_text_content()}"

    async def run(who: str) -> tuple[str, list[AgentEvent], ScriptedChatModel]:
        model = ScriptedChatModel(default=answer)
        agent = Agent(name="a", system_prompt="s", model=model, middlewares=[mw])
        events = [e async for e in agent.reply_stream(who)]
        return who, events, model

    results = await asyncio.gather(*(run(f"user-{i}") for i in range(8)))
    for who, events, model in results:
        seen = model.calls[0].text()
        assert f"memory for {who}" in seen and f"hint for {who}" in seen
        others = [f"for user-{i}" for i in range(8) if f"user-{i}" != who]
        assert not any(o in seen for o in others)
        hints = [e for e in events if isinstance(e, HintInjectedEvent)]
        assert [h.hint.hint for h in hints] == [f"hint for {who}"]
        mem = [e for e in events if isinstance(e, MemoryEvent)]
        assert [m.message for m in mem] == [who]
        assert events[-1].type == "reply_end"
        assert events[-1].msg.get_text_content() == f"answer to {who}"  # type: ignore[union-attr]


class PromptCounter(MiddlewareBase):
    def __init__(self) -> None:
        self.builds = 0
        self.version = 0
        self.seen: dict[str, int] = {}

    async def on_system_prompt(self, ctx: ReplyContext, prompt: str) -> str:
        self.builds += 1
        self.seen[ctx.reply_id] = self.version
        return f"{prompt}\n[index v{self.version}]"

    async def system_prompt_changed(self, ctx: ReplyContext) -> bool:
        return self.seen.get(ctx.reply_id) != self.version


async def test_system_prompt_is_built_once_per_reply_unless_it_changed() -> None:
    mw = PromptCounter()
    model = ScriptedChatModel([tool_call("echo", text="1"), tool_call("echo", text="2"), "done"])
    agent = Agent(
        name="a", system_prompt="base", model=model, toolkit=Toolkit([echo]), middlewares=[mw]
    )
    await agent.reply("go")
    assert mw.builds == 1
    assert {c.system_prompt for c in model.calls} == {"base\n[index v0]"}

    def bump_then_answer(call: ScriptedCall) -> object:
        mw.version += 1
        return tool_call("echo", text="3")

    model.queue(bump_then_answer, "done")
    await agent.reply("again")
    assert mw.builds == 3
    assert model.calls[-1].system_prompt == "base\n[index v1]"


async def test_typed_reply_state_is_per_middleware_per_reply_and_apart_from_the_dict() -> None:
    from dataclasses import dataclass, field

    @dataclass
    class Calls:
        iterations: list[int] = field(default_factory=list)

    seen: list[tuple[str, list[int]]] = []

    class Counter(MiddlewareBase):
        def __init__(self, name: str) -> None:
            self.name = name

        async def on_reasoning(self, ctx: ReasoningContext, next_handler):  # type: ignore[no-untyped-def, override]
            state = ctx.reply.state_for(self, Calls)
            state.iterations.append(ctx.iteration)
            ctx.reply.state_for(self)["plain"] = True  # the dict is a separate state
            assert ctx.reply.state_for(self, Calls) is state
            async for event in next_handler(ctx):
                yield event

        async def on_reply(self, ctx: ReplyContext, next_handler):  # type: ignore[no-untyped-def, override]
            async for event in next_handler(ctx):
                yield event
            seen.append((self.name, ctx.state_for(self, Calls).iterations))
            assert ctx.state_for(self) == {"plain": True}

    model = ScriptedChatModel([tool_call("echo", text="x"), "done", "again"])
    agent = Agent(
        name="a",
        system_prompt="",
        model=model,
        toolkit=Toolkit(tools=[echo]),
        middlewares=[Counter("one"), Counter("two")],
    )
    await agent.reply("first")
    await agent.reply("second")  # a new reply starts with fresh state
    assert seen == [("two", [1, 2]), ("one", [1, 2]), ("two", [1]), ("one", [1])]
