"""Recall of what was cut (issue 11, item 4): the ``recall`` tool, automatic recall within
its budget, and an omission notice that says how to recall."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mnemoscope.agent import Agent
from mnemoscope.context import ContextPolicy, ExtractiveSummarizer, RecallIndex
from mnemoscope.events import ContextEvent
from mnemoscope.memory import AsyncSQLAlchemyMemory, InMemoryMemory
from mnemoscope.message import AssistantMsg, UserMsg
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import RecallTool, Toolkit

FACT = "My dog is called Biscuit and she loves the beach at Xiamen."


def test_bm25_ranks_the_matching_turn_first() -> None:
    msgs = [UserMsg("u", f"filler turn about weather number {i}") for i in range(50)]
    msgs.insert(17, UserMsg("u", FACT))
    hits = RecallIndex().search("what is my dog called?", msgs, limit=3)
    assert hits[0].msg.content[0].text == FACT  # type: ignore[union-attr]
    assert RecallIndex().search("the of and", msgs) == []


def _chat(*turns: tuple[str, str]) -> list:
    """Turns as stored, one second apart: ``(speaker, text)``."""
    start = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
    return [
        UserMsg(name, text, timestamp=start + timedelta(seconds=i))
        for i, (name, text) in enumerate(turns)
    ]


def _filler(n: int) -> list[tuple[str, str]]:
    return [("Bo" if i % 2 else "Ann", f"small talk about the weather, day {i}") for i in range(n)]


def test_a_question_naming_a_speaker_finds_what_that_speaker_said() -> None:
    # both cook; only the speaker tells the turns apart (Ann never says her own name)
    msgs = _chat(
        *_filler(20),
        ("Bo", "I cook rice."),
        ("Ann", "I cook pasta with fresh tomatoes on Sundays."),
        *_filler(20),
    )
    hits = RecallIndex().search("What does Ann cook?", msgs, limit=2)
    assert hits[0].msg.get_text_content().startswith("I cook pasta")


def test_the_reply_next_to_a_matching_turn_is_found_without_repeating_its_words() -> None:
    msgs = _chat(
        *_filler(30),
        ("Bo", "How was the support group meeting last night?"),
        ("Ann", "So moving. I cried the whole way home."),
        *_filler(30),
    )
    hits = RecallIndex().search("support group meeting", msgs, limit=10)
    found = [h.msg.get_text_content() for h in hits]
    assert found[0].startswith("How was the support group")
    # no query word in the reply: it is found as the matching turn's neighbour (with the
    # turn before, which shares the lift); turns far from any match are not lifted
    assert len(found) == 3 and any(text.startswith("So moving") for text in found)


def test_a_hyphenated_word_matches_its_joined_form() -> None:
    msgs = _chat(*_filler(10), ("Ann", "Running helps me de-stress after work."), *_filler(10))
    hits = RecallIndex().search("How does Ann destress?", msgs, limit=1)
    assert hits[0].msg.get_text_content().startswith("Running helps")


async def _filled(memory: InMemoryMemory, n: int = 60) -> None:
    await memory.add([UserMsg("user", FACT), AssistantMsg("assistant", "Noted.")])
    for i in range(n):
        await memory.add(
            [
                UserMsg("user", f"Tell me about topic {i}: " + "filler words " * 10),
                AssistantMsg("assistant", f"Topic {i} is " + "general chatter " * 10),
            ]
        )


async def test_automatic_recall_brings_back_the_cut_turn_within_its_budget() -> None:
    seen = {}
    for recall in (0, 400):
        memory = InMemoryMemory()
        await _filled(memory)
        model = ScriptedChatModel(["fine"])
        policy = ContextPolicy(window_tokens=1500, recall_tokens=recall)
        agent = Agent("assistant", "sys", model, memory=memory, context_policy=policy)
        events = [ev async for ev in agent.reply_stream("What is my dog called?")]
        ctx = next(e for e in events if isinstance(e, ContextEvent))
        text = "\n".join(
            m.get_text_content() + "".join(h.hint for h in m.hints) for m in model.calls[0].messages
        )
        seen[recall] = (FACT in text, ctx)
    assert seen[0][0] is False  # the window alone has cut it
    found, ctx = seen[400]
    assert found and ctx.recalled and ctx.parts["recalled"] <= 400 and ctx.tokens <= 1500
    assert set(ctx.recalled) <= set(ctx.dropped)


async def test_notice_tells_the_model_to_use_the_recall_tool() -> None:
    memory = InMemoryMemory()
    await _filled(memory)
    model = ScriptedChatModel(["fine"])
    agent = Agent(
        "assistant",
        "sys",
        model,
        memory=memory,
        toolkit=Toolkit([RecallTool()]),
        context_policy=ContextPolicy(window_tokens=1500),
    )
    await agent.reply("hello")
    notice = model.calls[0].messages[1].hints[0].hint
    assert "recall tool" in notice and "Ask the user" not in notice


async def test_recall_tool_finds_compacted_turns_verbatim() -> None:
    memory = InMemoryMemory()
    await _filled(memory)
    model = ScriptedChatModel([tool_call("recall", query="dog name"), "Biscuit"])
    policy = ContextPolicy(window_tokens=1500, summarizer=ExtractiveSummarizer(fact_chars=10))
    agent = Agent(
        "assistant",
        "sys",
        model,
        memory=memory,
        toolkit=Toolkit([RecallTool()]),
        context_policy=policy,
    )
    await agent.reply("What is my dog called?")
    assert FACT not in model.calls[0].messages[1].get_text_content()  # compacted away
    out = model.calls[1].messages[-1].tool_results[0].output_text()
    assert FACT in out and "UTC" in out


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from mnemoscope.memory import AsyncSQLAlchemyMemory
    from mnemoscope.message import AssistantMsg, UserMsg

    async def main():
        url = f"sqlite+aiosqlite:///{sys.argv[1]}"
        memory = AsyncSQLAlchemyMemory(url, user_id="u", session_id="s")
        await memory.add([UserMsg("user", sys.argv[2]), AssistantMsg("assistant", "Noted.")])
        await memory.aclose()

    asyncio.run(main())
    """
)


async def test_recall_finds_what_another_process_stored(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, str(db), FACT, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    memory = AsyncSQLAlchemyMemory(f"sqlite+aiosqlite:///{db}", user_id="u", session_id="s")
    try:
        model = ScriptedChatModel([tool_call("recall", query="Biscuit beach"), "ok"])
        agent = Agent("assistant", "sys", model, memory=memory, toolkit=Toolkit([RecallTool()]))
        await agent.reply("where does my dog like to go?")
        assert FACT in model.calls[1].messages[-1].tool_results[0].output_text()
    finally:
        await memory.aclose()


def test_a_new_candidate_list_is_searched_afresh() -> None:
    index = RecallIndex()
    msgs = _chat(*_filler(20))
    assert index.search("pottery", msgs) == []
    later = [*msgs, *_chat(("Ann", "I signed up for pottery."))]
    (hit,) = index.search("pottery", later, limit=1)
    assert hit.msg.get_text_content() == "I signed up for pottery."
    assert index.search("pottery", msgs) == []  # and the first list again
