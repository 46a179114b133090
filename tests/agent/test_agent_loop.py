"""The ReAct loop driven by the scripted model."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from mnemoscope.agent import Agent
from mnemoscope.errors import UserError
from mnemoscope.memory import InMemoryMemory
from mnemoscope.message import HintBlock, Msg, ToolResultBlock, UserMsg
from mnemoscope.middleware import (
    ReplyEndEvent,
    TextDeltaEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from mnemoscope.permission import PermissionRequest
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import PathAccess, ToolBase, ToolContext, Toolkit, ToolResult


async def get_weather(city: str) -> str:
    """Current weather of a city.

    Args:
        city: the city name.
    """
    return f"Sunny, 24°C in {city}"


def broken_tool(x: int) -> str:
    """Always fails."""
    raise RuntimeError(f"disk on fire ({x})")


def make_agent(responses: list[object], **kwargs: object) -> tuple[Agent, ScriptedChatModel]:
    model = ScriptedChatModel(responses)
    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=[get_weather, broken_tool]),
        **kwargs,  # type: ignore[arg-type]
    )
    return agent, model


async def test_tool_call_is_executed_and_result_fed_back() -> None:
    agent, model = make_agent(
        [tool_call("get_weather", city="Hangzhou"), "It is sunny in Hangzhou."]
    )
    reply = await agent.reply("What's the weather in Hangzhou?")
    assert reply.get_text_content() == "It is sunny in Hangzhou."
    assert len(model.calls) == 2
    second = model.calls[1]
    results = [b for m in second.messages for b in m.tool_results]
    assert results[0].output == "Sunny, 24°C in Hangzhou"
    assert second.messages[0].role == "system"
    assert second.messages[0].get_text_content() == "You are a helpful assistant."
    assert "get_weather" in model.calls[0].tool_names


async def test_reply_stream_yields_events_in_order_and_final_msg() -> None:
    agent, _ = make_agent([tool_call("get_weather", city="Paris"), "Done."])
    events = [e async for e in agent.reply_stream("weather in Paris?")]
    types = [e.type for e in events]
    assert types == [
        "reply_start",
        "reasoning_start",
        "context",
        "tool_use",
        "tool_result",
        "reasoning_start",
        "context",
        "text_delta",
        "reply_end",
    ]
    assert isinstance(events[3], ToolUseEvent) and events[3].tool_use.input == {"city": "Paris"}
    assert isinstance(events[4], ToolResultEvent) and "Paris" in events[4].result.output_text()
    end = events[-1]
    assert isinstance(end, ReplyEndEvent) and end.msg.get_text_content() == "Done."
    assert len({e.reply_id for e in events}) == 1


async def test_streamed_deltas_add_up_to_the_answer() -> None:
    model = ScriptedChatModel(["one two three four"], stream=True)
    agent = Agent(name="a", system_prompt="s", model=model)
    events = [e async for e in agent.reply_stream("count")]
    deltas = "".join(e.delta for e in events if isinstance(e, TextDeltaEvent))
    assert deltas == "one two three four"
    assert events[-1].msg.get_text_content() == deltas  # type: ignore[union-attr]


async def test_raising_tool_becomes_error_result_and_loop_goes_on() -> None:
    agent, model = make_agent([tool_call("broken_tool", x=3), "Sorry, the tool failed."])
    reply = await agent.reply("try it")
    assert reply.get_text_content() == "Sorry, the tool failed."
    result = model.calls[1].messages[-1].tool_results[0]
    assert result.state == "error"
    assert "RuntimeError: disk on fire (3)" in result.output_text()


async def test_invalid_tool_input_and_unknown_tool_are_reported_to_the_model() -> None:
    agent, model = make_agent(
        [[tool_call("get_weather", town="x"), tool_call("no_such_tool")], "ok"]
    )
    await agent.reply("go")
    results = model.calls[1].messages[-1].tool_results
    assert "Invalid input for get_weather" in results[0].output_text()
    assert "city: Field required" in results[0].output_text()
    assert "Unknown tool 'no_such_tool'" in results[1].output_text()


async def test_max_iters_ends_the_loop_with_a_clear_reply() -> None:
    agent, model = make_agent([tool_call("get_weather", city="A")] * 3, max_iters=3)
    events = [e async for e in agent.reply_stream("loop")]
    end = events[-1]
    assert isinstance(end, ReplyEndEvent) and end.exit_reason == "max_iters"
    assert "max_iters" in end.msg.get_text_content()
    assert len(model.calls) == 3


async def test_history_carries_over_between_replies_and_hints_do_not() -> None:
    memory = InMemoryMemory()
    agent, model = make_agent(["Hi Alice.", "You are Alice."], memory=memory)
    await agent.reply(UserMsg("alice", "I am Alice."))
    hint = HintBlock(hint="one-off", source="test")
    await memory.add(UserMsg("hint", [hint]), marks="hint")
    await agent.reply("Who am I?")
    seen = model.calls[1].text()
    assert "I am Alice." in seen and "Hi Alice." in seen
    assert "one-off" not in seen
    assert await memory.size() == 5


async def test_tool_use_and_result_are_stored_together() -> None:
    memory = InMemoryMemory()
    agent, _ = make_agent([tool_call("get_weather", city="B"), "done"], memory=memory)
    await agent.reply("go")
    stored = await memory.get()
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1].tool_uses[0].id == stored[2].tool_results[0].id
    assert [m.id for m in await memory.get(marks="tool_result")] == [stored[2].id]


class _WriteTool(ToolBase):
    name = "write_file"
    description = "Write a file."

    class Input(BaseModel):
        path: str

    def permission_paths(self, tool_input: Input) -> list[PathAccess]:  # type: ignore[override]
        return [PathAccess(tool_input.path, "write")]

    async def call(self, tool_input: Input, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        return ToolResult(output=f"wrote {tool_input.path}")


async def test_permission_ask_without_callback_is_a_readable_denial(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = ScriptedChatModel([tool_call("write_file", path=str(tmp_path / "a.txt")), "ok"])
    agent = Agent(name="a", system_prompt="s", model=model, toolkit=Toolkit([_WriteTool()]))
    agent.state.permission_context.cwd = str(tmp_path)
    events = [e async for e in agent.reply_stream("write")]
    perm = [e for e in events if e.type == "permission"]
    assert perm and perm[0].behavior == "ask" and perm[0].approved is False
    result = model.calls[1].messages[-1].tool_results[0]
    assert result.state == "denied"
    assert "no one is available to approve it" in result.output_text()


async def test_permission_ask_callback_approves(tmp_path) -> None:  # type: ignore[no-untyped-def]
    asked: list[PermissionRequest] = []

    async def approve(request: PermissionRequest) -> bool:
        asked.append(request)
        return True

    model = ScriptedChatModel([tool_call("write_file", path=str(tmp_path / "a.txt")), "ok"])
    agent = Agent(name="a", system_prompt="s", model=model, toolkit=Toolkit([_WriteTool()]))
    agent.state.permission_context.cwd = str(tmp_path)
    agent.state.permission_context.ask_callback = approve
    await agent.reply("write")
    assert asked and asked[0].tool_name == "write_file"
    result = model.calls[1].messages[-1].tool_results[0]
    assert result.state == "success" and result.output == f"wrote {tmp_path / 'a.txt'}"


async def test_string_and_msg_inputs_are_both_accepted() -> None:
    agent, model = make_agent(["a", "b"])
    await agent.reply("plain string")
    await agent.reply(Msg(name="bob", role="user", content="a msg"))
    assert model.calls[0].messages[-1].name == "user"
    assert model.calls[1].messages[-1].name == "bob"


def test_bad_construction_is_a_user_error() -> None:
    with pytest.raises(UserError, match="ChatModelBase"):
        Agent(name="a", system_prompt="s", model="gpt-4o")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="max_iters"):
        Agent(name="a", system_prompt="s", model=ScriptedChatModel([]), max_iters=0)
    with pytest.raises(UserError, match="MiddlewareBase"):
        Agent(name="a", system_prompt="s", model=ScriptedChatModel([]), middlewares=[object()])  # type: ignore[list-item]


async def test_model_running_out_of_script_is_a_clear_error() -> None:
    agent, _ = make_agent([])
    with pytest.raises(Exception, match="ran out of responses"):
        await agent.reply("hi")


async def test_cancelled_reply_stores_no_dangling_tool_use() -> None:
    started = asyncio.Event()

    async def slow(seconds: float) -> str:
        """Sleep.

        Args:
            seconds: how long.
        """
        started.set()
        await asyncio.sleep(seconds)
        return "slept"

    memory = InMemoryMemory()
    model = ScriptedChatModel([tool_call("slow", seconds=30)])
    agent = Agent(name="a", system_prompt="s", model=model, toolkit=Toolkit([slow]), memory=memory)
    task = asyncio.create_task(agent.reply("sleep"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await memory.get()
    assert [m.role for m in stored] == ["user"]
    assert not any(isinstance(b, ToolResultBlock) for m in stored for b in m.content)


async def test_max_history_messages_bounds_what_is_loaded() -> None:
    memory = InMemoryMemory()
    agent, model = make_agent(["a1", "a2", "a3"], memory=memory, max_history_messages=2)
    await agent.reply("q1")
    await agent.reply("q2")
    await agent.reply("q3")
    seen = [m.get_text_content() for m in model.calls[2].messages[1:]]
    # only the two latest stored messages, then the current question
    assert seen == ["q2", "a2", "q3"]
    with pytest.raises(UserError, match="max_history_messages"):
        Agent(name="a", system_prompt="s", model=model, max_history_messages=-1)
