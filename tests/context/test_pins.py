"""Pinning (issue 11, item 5) and the context event (items 6-7)."""

from __future__ import annotations

import pytest

from mnemoscope.agent import Agent
from mnemoscope.context import (
    COMPRESSED_MARK,
    PINNED_MARK,
    ContextPolicy,
    ExtractiveSummarizer,
    PinBudgetError,
)
from mnemoscope.events import ContextEvent
from mnemoscope.memory import InMemoryMemory
from mnemoscope.message import AssistantMsg, UserMsg
from mnemoscope.testing import ScriptedChatModel


async def _session(memory: InMemoryMemory, n: int = 60) -> UserMsg:
    rule = UserMsg("user", "Always answer in French.")
    await memory.add([rule, AssistantMsg("assistant", "D'accord.")])
    await memory.update_marks(rule.id, add=PINNED_MARK)
    for i in range(n):
        await memory.add(
            [
                UserMsg("user", f"question {i} " + "words " * 12),
                AssistantMsg("assistant", "answer " * 12),
            ]
        )
    return rule


@pytest.mark.parametrize("summarizer", [None, ExtractiveSummarizer()])
async def test_a_pinned_message_stays_in_every_context(
    summarizer: ExtractiveSummarizer | None,
) -> None:
    memory = InMemoryMemory()
    rule = await _session(memory)
    model = ScriptedChatModel(default="ok")
    policy = ContextPolicy(window_tokens=1200, summarizer=summarizer)
    agent = Agent("assistant", "sys", model, memory=memory, context_policy=policy)
    for i in range(5):
        events = [e async for e in agent.reply_stream(f"more {i}")]
        ctx = next(e for e in events if isinstance(e, ContextEvent))
        assert rule.id in ctx.pinned and rule.id in {m.id for m in model.calls[-1].messages}
        assert ctx.dropped or ctx.compacted
    assert rule.id not in {m.id for m in await memory.get(marks=COMPRESSED_MARK)}


async def test_pins_over_their_budget_raise_an_error_naming_it() -> None:
    memory = InMemoryMemory()
    big = UserMsg("user", "remember this " * 200)
    await memory.add(big, marks=PINNED_MARK)
    agent = Agent(
        "assistant",
        "sys",
        ScriptedChatModel(["ok"]),
        memory=memory,
        context_policy=ContextPolicy(window_tokens=4000, pin_tokens=100),
    )
    with pytest.raises(PinBudgetError, match=r"ContextPolicy\.pin_tokens=100"):
        await agent.reply("hi")


async def test_context_event_reports_parts_and_prefix_changes_only_at_compactions() -> None:
    memory = InMemoryMemory()
    model = ScriptedChatModel(default="answer " * 20)
    policy = ContextPolicy(window_tokens=1500, summarizer=ExtractiveSummarizer())
    agent = Agent("assistant", "sys", model, memory=memory, context_policy=policy)
    events: list[ContextEvent] = []
    compactions = 0
    for i in range(60):
        async for e in agent.reply_stream(f"turn {i} " + "words " * 15):
            if isinstance(e, ContextEvent):
                events.append(e)
            compactions += e.type == "compaction" and e.status == "done"  # type: ignore[union-attr]
    assert len(events) == len(model.calls) == 60
    assert compactions >= 2 and events[-1].prefix_changes == compactions
    last = events[-1]
    assert set(last.parts) >= {"system", "summary", "history", "current", "pinned", "recalled"}
    assert last.tokens == sum(last.parts.values()) and last.summary_id and last.compacted
    assert set(last.kept).isdisjoint(last.compacted)
