"""Hardening of the agent loop (issue 10, items 16 and 17), through the real Agent.

* 16: with ``max_history_messages`` and a provider that reuses tool-call ids (``call_0``
  in every step), no tool result is sent without its call, nor a call without its result;
* 17: tool code run by the acting phase (``check_permissions``, ``permission_paths``)
  never crashes the reply.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from mnemoscope.agent import Agent
from mnemoscope.memory import InMemoryMemory
from mnemoscope.testing import ScriptedChatModel, assert_tool_pairs, tool_call
from mnemoscope.tool import ToolBase, ToolContext, Toolkit, ToolResult


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no __str__ for you")


class _Boom(BaseException):
    """A BaseException subclass a careless library might raise."""


# ------------------------------------------------------------------------ item 16
async def test_history_window_with_reused_ids_sends_no_orphan_result() -> None:
    async def echo(text: str) -> str:
        """Echo the text."""
        return text

    memory = InMemoryMemory()
    # a provider that numbers the calls of every step from call_0
    model = ScriptedChatModel(
        [
            tool_call("echo", "call_0", text="one"),
            "first done",
            tool_call("echo", "call_0", text="two"),
            "second done",
            "third",
        ]
    )
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        memory=memory,
        toolkit=Toolkit(tools=[echo]),
        max_history_messages=6,
    )
    await agent.reply("turn one")
    await agent.reply("turn two")
    assert await memory.size() == 8
    await asyncio.wait_for(agent.reply("turn three"), 30)
    sent = model.calls[-1].messages
    # the window starts with turn one's result; its call was cut off: it is not sent
    outputs = [b.output_text() for m in sent for b in m.tool_results]
    assert outputs == ["two"]
    assert_tool_pairs(sent)


async def test_budget_and_window_together_keep_pairs_whole() -> None:
    async def echo(text: str) -> str:
        """Echo the text."""
        return text

    script: list[Any] = []
    for i in range(4):
        script += [
            [tool_call("echo", "call_0", text=f"a{i}"), tool_call("echo", "call_1", text=f"b{i}")],
            f"done {i}",
        ]
    model = ScriptedChatModel([*script, "last"])
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(tools=[echo]),
        max_history_messages=6,
        max_context_tokens=120,
    )
    for i in range(4):
        await agent.reply(f"turn {i}")
    await agent.reply("final turn")
    for call in model.calls:
        assert_tool_pairs(call.messages)


# ------------------------------------------------------------------------ item 17
async def test_raising_permission_checks_become_error_results_and_the_tool_does_not_run() -> None:
    ran: list[str] = []

    class BadCheck(ToolBase):
        name = "bad_check"
        description = "Its permission check raises."

        class Input(BaseModel):
            pass

        async def check_permissions(self, tool_input: BaseModel, ctx: ToolContext) -> Any:
            raise _UnprintableError

        async def call(self, tool_input: Any, ctx: ToolContext) -> ToolResult:
            ran.append(self.name)
            return ToolResult(output="ran")

    class BadPaths(BadCheck):
        name = "bad_paths"

        async def check_permissions(self, tool_input: BaseModel, ctx: ToolContext) -> Any:
            return None

        def permission_paths(self, tool_input: BaseModel) -> Any:
            raise KeyError("path")

    class BaseExceptionCheck(BadCheck):
        name = "base_exception_check"

        async def check_permissions(self, tool_input: BaseModel, ctx: ToolContext) -> Any:
            raise _Boom("from a careless library")

    model = ScriptedChatModel(
        [
            [tool_call("bad_check"), tool_call("bad_paths"), tool_call("base_exception_check")],
            "fine",
        ]
    )
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(tools=[BadCheck(), BadPaths(), BaseExceptionCheck()]),
    )
    reply = await asyncio.wait_for(agent.reply("go"), 60)
    assert reply.get_text_content() == "fine"
    first, second, third = [b for m in model.calls[1].messages for b in m.tool_results]
    assert first.state == "error" and "permission check of bad_check failed" in first.output
    assert first.output_text().endswith("so the call was not run.")
    assert second.state == "error" and "KeyError" in second.output_text()
    assert third.state == "error" and "_Boom: from a careless library" in third.output_text()
    assert ran == []
