"""LocalLongTermMemory behind LongTermMemoryMiddleware: the three modes through an agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemoscope.agent import Agent
from mnemoscope.memory._local_ltm import LocalLongTermMemory
from mnemoscope.message import UserMsg
from mnemoscope.middleware import LongTermMemoryMiddleware
from mnemoscope.testing import HashEmbeddingModel, ScriptedChatModel, tool_call
from mnemoscope.tool import Toolkit


async def _agent(mw: LongTermMemoryMiddleware, model: ScriptedChatModel) -> Agent:
    return Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=await mw.list_tools()),
        middlewares=[mw],
    )


def _tool_results(model: ScriptedChatModel, call: int) -> str:
    return model.calls[call].text()


async def test_static_control_injects_and_writes_back(tmp_path: Path) -> None:
    store = LocalLongTermMemory(tmp_path / "ltm.db", embedding_model=HashEmbeddingModel())
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    model = ScriptedChatModel(["Noted: dark mode.", "Here it is, in dark mode."])
    agent = await _agent(mw, model)
    assert await mw.list_tools() == []
    await agent.reply(UserMsg("alice", "Remember that I prefer dark-mode charts."))
    stored = [m.content for m in await store.list(user_id="alice")]
    assert stored == ["Remember that I prefer dark-mode charts.", "Noted: dark mode."]
    await agent.reply(UserMsg("alice", "Which mode do I like for my charts?"))
    shown = [m for m in model.calls[1].messages if m.name == "memory"]
    assert len(shown) == 1 and "dark-mode charts" in shown[0].get_text_content()
    # another user's agent over the same file sees nothing
    other_model = ScriptedChatModel(["ok"])
    bob = LongTermMemoryMiddleware(store, user_id="bob", mode="static_control")
    await (await _agent(bob, other_model)).reply(UserMsg("bob", "Which mode for charts?"))
    assert not [m for m in other_model.calls[0].messages if m.name == "memory"]
    await mw.aclose()
    await bob.aclose()
    await store.aclose()


@pytest.mark.parametrize("mode", ["agent_control", "both"])
async def test_agent_tools_add_and_search(mode: str) -> None:
    store = LocalLongTermMemory(":memory:", embedding_model=HashEmbeddingModel())
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode=mode)  # type: ignore[arg-type]
    assert sorted(t.name for t in await mw.list_tools()) == ["add_memory", "search_memory"]
    model = ScriptedChatModel(
        [
            tool_call(
                "add_memory",
                thinking="a durable preference",
                content=["Alice prefers dark-mode charts.", "Alice is allergic to peanuts."],
            ),
            "Saved.",
            tool_call("search_memory", keywords=["peanuts allergy"], limit=3),
            "You are allergic to peanuts.",
        ]
    )
    agent = await _agent(mw, model)
    await agent.reply(UserMsg("alice", "Remember: dark-mode charts, and I'm allergic to peanuts."))
    facts = {m.content for m in await store.list(user_id="alice")}
    assert {"Alice prefers dark-mode charts.", "Alice is allergic to peanuts."} <= facts
    await agent.reply(UserMsg("alice", "Anything I can't eat?"))
    assert "Alice is allergic to peanuts." in _tool_results(model, 3)
    await mw.aclose()
    await store.aclose()
