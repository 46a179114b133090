"""The seed's ``Agent(...)`` / ``await agent.reply(...)`` example, with two kinds of model.

1. ``ScriptedChatModel`` (in-process);
2. ``OpenAIChatModel`` over real HTTP against the local OpenAI-compatible test server,
   streaming and not: the tool call is executed, its result fed back, the answer returned.
"""

from __future__ import annotations

import json

import pytest

from mnemoscope.agent import Agent
from mnemoscope.message import UserMsg
from mnemoscope.middleware import ReplyEndEvent, TextDeltaEvent, ToolResultEvent
from mnemoscope.model import OpenAIChatModel
from mnemoscope.testing import OpenAICompatServer, ScriptedChatModel, ServerToolCall, tool_call
from mnemoscope.tool import Toolkit


async def lookup_city(user: str) -> str:
    """Where a user lives.

    Args:
        user: the user's name.
    """
    return {"alice": "Hangzhou"}.get(user, "unknown")


async def test_seed_example_with_scripted_model() -> None:
    model = ScriptedChatModel([tool_call("lookup_city", user="alice"), "You live in Hangzhou."])
    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=[lookup_city]),
    )
    reply = await agent.reply(UserMsg("alice", "Where do I live?"))
    assert reply.get_text_content() == "You live in Hangzhou."
    assert model.calls[1].messages[-1].tool_results[0].output == "Hangzhou"


@pytest.mark.parametrize("stream", [False, True])
async def test_seed_example_with_openai_model_over_http(stream: bool) -> None:
    async with OpenAICompatServer(
        [ServerToolCall("lookup_city", {"user": "alice"}), "You live in Hangzhou."],
        api_key="test-key",
    ) as server:
        model = OpenAIChatModel(
            "test-model", api_key="test-key", base_url=server.base_url, stream=stream
        )
        agent = Agent(
            name="assistant",
            system_prompt="You are a helpful assistant.",
            model=model,
            toolkit=Toolkit(tools=[lookup_city]),
        )
        events = [e async for e in agent.reply_stream("Where do I live?")]
        await model.aclose()

    end = events[-1]
    assert isinstance(end, ReplyEndEvent)
    assert end.msg.get_text_content() == "You live in Hangzhou."
    results = [e.result for e in events if isinstance(e, ToolResultEvent)]
    assert results[0].output == "Hangzhou" and results[0].state == "success"
    if stream:
        deltas = "".join(e.delta for e in events if isinstance(e, TextDeltaEvent))
        assert deltas == "You live in Hangzhou."

    first, second = server.chat_requests
    assert first["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    assert [t["function"]["name"] for t in first["tools"]] == ["lookup_city"]
    # the second request carries the assistant's tool call and the tool's result
    tool_msgs = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool_msgs and tool_msgs[0]["content"] == "Hangzhou"
    call = next(m for m in second["messages"] if m.get("tool_calls"))
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"user": "alice"}
    assert tool_msgs[0]["tool_call_id"] == call["tool_calls"][0]["id"]
