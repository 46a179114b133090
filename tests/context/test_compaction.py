"""Non-destructive compaction (issue 11, item 2)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from mnemoscope.agent import Agent
from mnemoscope.context import (
    COMPRESSED_MARK,
    COVERS_KEY,
    SUMMARY_MARK,
    CompactionContext,
    ContextPolicy,
    ExtractiveSummarizer,
    SummarizerBase,
)
from mnemoscope.events import CompactionEvent, ContextEvent
from mnemoscope.memory import InMemoryMemory, MemoryBase
from mnemoscope.message import Msg
from mnemoscope.middleware import AgentEvent, MiddlewareBase
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import Toolkit, function_tool

from .conftest import check_pairs


@function_tool(is_read_only=True)
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key.
    """
    return f"value of {key} is " + "data " * 30


def _script(turn_tools: Callable[[int], int] = lambda i: 2 if i % 3 == 0 else 0):
    """A model answering each user turn with ``turn_tools(i)`` parallel calls, then text."""
    counter = {"turn": -1}

    def respond(call: object) -> object:
        messages = call.messages  # type: ignore[attr-defined]
        last = messages[-1]
        if last.tool_results:
            return f"answer after tools, turn {counter['turn']} " + "talk " * 20
        counter["turn"] += 1
        n = turn_tools(counter["turn"])
        if n:
            return [tool_call("lookup", key=f"k{counter['turn']}-{j}") for j in range(n)]
        return f"plain answer {counter['turn']} " + "talk " * 20

    return respond


def _agent(
    memory: MemoryBase, policy: ContextPolicy, **kw: object
) -> tuple[Agent, ScriptedChatModel]:
    model = ScriptedChatModel(default=_script())
    agent = Agent(
        "assistant",
        "You are terse.",
        model,
        toolkit=Toolkit([lookup]),
        memory=memory,
        context_policy=policy,
        **kw,  # type: ignore[arg-type]
    )
    return agent, model


POLICY = ContextPolicy(window_tokens=1500, summarizer=ExtractiveSummarizer())


async def _run(agent: Agent, n: int, start: int = 0) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for i in range(start, start + n):
        async for ev in agent.reply_stream(f"user turn {i}: " + "please " * 15):
            events.append(ev)
    return events


async def test_compaction_keeps_originals_marks_them_and_covers_exact_ids() -> None:
    memory = InMemoryMemory()
    agent, model = _agent(memory, POLICY)
    events = await _run(agent, 20)
    done = [e for e in events if isinstance(e, CompactionEvent) and e.status == "done"]
    assert len(done) >= 2  # and the later ones roll up the earlier
    stored = await memory.get()
    summaries = await memory.get(marks=SUMMARY_MARK)
    assert summaries and summaries[-1].id == done[-1].summary_id
    latest = summaries[-1]
    compressed = {m.id for m in await memory.get(marks=COMPRESSED_MARK)}
    covers = latest.metadata[COVERS_KEY]
    # roll-up: the latest covers the previous summary and everything that one covered
    previous = summaries[-2]
    assert previous.id in covers and set(previous.metadata[COVERS_KEY]) <= set(covers)
    assert set(covers) == compressed  # exactly what is marked compressed
    # nothing deleted: 20 user turns, their answers and tool steps are all still stored
    assert sum(1 for m in stored if m.name == "user") == 20
    # no tool pair split: a compressed step's results are compressed too
    by_id = {m.id: m for m in stored}
    for i, m in enumerate(stored):
        if m.tool_uses and m.id in compressed:
            assert stored[i + 1].tool_results and stored[i + 1].id in compressed
    # the model sees system, the summary, then only uncompressed messages
    last_input = model.calls[-1].messages
    check_pairs(last_input)
    assert (
        last_input[1].name == "summary"
        and "## Decisions and facts" in last_input[1].get_text_content()
    )
    assert not any(m.id in compressed for m in last_input[2:] if m.id in by_id)


class _Failing(SummarizerBase):
    def __init__(self, how: str) -> None:
        self.how = how

    async def summarize(self, msgs: Sequence[Msg], previous: Msg | None) -> str:
        if self.how == "hang":
            await asyncio.sleep(60)
        raise RuntimeError("summariser down")


@pytest.mark.parametrize("how", ["raise", "hang"])
async def test_summariser_failure_loses_nothing(how: str, caplog: pytest.LogCaptureFixture) -> None:
    memory = InMemoryMemory()
    policy = ContextPolicy(window_tokens=1500, summarizer=_Failing(how), summarizer_timeout=0.05)
    agent, model = _agent(memory, policy)
    caplog.set_level(logging.WARNING, logger="mnemoscope.context")
    events = await asyncio.wait_for(_run(agent, 14), 60)
    failed = [e for e in events if isinstance(e, CompactionEvent)]
    assert failed and all(e.status == "failed" for e in failed)
    assert ("longer than" if how == "hang" else "summariser down") in failed[0].error
    assert "compaction of" in caplog.text and "failed" in caplog.text
    assert not await memory.get(marks=[SUMMARY_MARK, COMPRESSED_MARK])
    assert sum(1 for m in await memory.get() if m.name == "user") == 14
    last_input = model.calls[-1].messages
    check_pairs(last_input)
    assert "left out to fit the context budget" in last_input[1].hints[0].hint


class _CustomSummary(MiddlewareBase):
    def __init__(self) -> None:
        self.seen: list[int] = []

    async def on_compress_context(
        self,
        ctx: CompactionContext,
        next_handler: Callable[[CompactionContext], AsyncIterator[AgentEvent]],
    ) -> AsyncIterator[AgentEvent]:
        self.seen.append(len(ctx.msgs))
        ctx.summary_text = f"custom summary of {len(ctx.msgs)} messages"
        async for ev in next_handler(ctx):
            yield ev


class _Skip(MiddlewareBase):
    async def on_compress_context(
        self,
        ctx: CompactionContext,
        next_handler: Callable[[CompactionContext], AsyncIterator[AgentEvent]],
    ) -> AsyncIterator[AgentEvent]:
        return
        yield


async def test_on_compress_context_hook_customises_or_skips() -> None:
    memory = InMemoryMemory()
    mw = _CustomSummary()
    agent, _ = _agent(memory, POLICY, middlewares=[mw])
    await _run(agent, 12)
    summaries = await memory.get(marks=SUMMARY_MARK)
    assert mw.seen and summaries[0].get_text_content().startswith("custom summary of")
    memory2 = InMemoryMemory()
    agent2, _ = _agent(memory2, POLICY, middlewares=[_Skip()])
    events = await _run(agent2, 12)
    assert any(isinstance(e, CompactionEvent) and e.status == "skipped" for e in events)
    assert not await memory2.get(marks=SUMMARY_MARK)


async def test_background_compaction_runs_after_the_reply() -> None:
    memory = InMemoryMemory()
    policy = ContextPolicy(
        window_tokens=1500, summarizer=ExtractiveSummarizer(), background_compaction=True
    )
    agent, model = _agent(memory, policy)
    events = await _run(agent, 12)
    assert await agent.wait_for_compaction(30)
    assert await memory.get(marks=SUMMARY_MARK)
    events += await _run(agent, 1, start=12)
    assert any(isinstance(e, CompactionEvent) and e.background for e in events)
    assert model.calls[-1].messages[1].name == "summary"
    check_pairs(model.calls[-1].messages)


async def test_a_crash_between_summary_and_marks_hides_the_covered_messages() -> None:
    """The summary is written first; its ``covers`` hides the originals on the next load."""
    memory = InMemoryMemory()
    agent, _ = _agent(memory, POLICY)
    await _run(agent, 12)
    # undo the marks, as if the process died right after storing the summary
    await memory.update_marks(None, remove=COMPRESSED_MARK)
    fresh, model2 = _agent(memory, POLICY)
    await _run(fresh, 1, start=12)
    summary = (await memory.get(marks=SUMMARY_MARK))[-1]
    covered = set(summary.metadata[COVERS_KEY])
    shown = model2.calls[0].messages
    assert shown[1].id == summary.id
    assert not any(m.id in covered for m in shown)
    check_pairs(shown)


RESUME = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from mnemoscope.agent import Agent
    from mnemoscope.context import ContextPolicy, ExtractiveSummarizer
    from mnemoscope.memory import AsyncSQLAlchemyMemory
    from mnemoscope.testing import ScriptedChatModel

    db, turns, question = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    async def main():
        memory = AsyncSQLAlchemyMemory(f"sqlite+aiosqlite:///{db}", user_id="u", session_id="s")
        model = ScriptedChatModel(default="answer " + "talk " * 20)
        policy = ContextPolicy(window_tokens=1500, summarizer=ExtractiveSummarizer())
        agent = Agent("assistant", "You are terse.", model, memory=memory, context_policy=policy)
        for i in range(turns):
            await agent.reply(f"user turn {i}: " + "please " * 15)
        if turns:
            import sqlite3
            await memory.aclose()
            # a consistent snapshot for the resuming process (copying the -wal/-shm files
            # races with SQLite removing them)
            src, dst = sqlite3.connect(db), sqlite3.connect(db + ".copy")
            with dst:
                src.backup(dst)
            src.close()
            dst.close()
            memory = AsyncSQLAlchemyMemory(f"sqlite+aiosqlite:///{db}", user_id="u", session_id="s")
            agent.memory = memory
        n = len(model.calls)
        await agent.reply(question)
        seen = [[m.name, m.get_text_content()] for m in model.calls[n].messages]
        await memory.aclose()
        print(json.dumps(seen))

    asyncio.run(main())
    """
)


def _proc(*args: str) -> list[list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", RESUME, *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_resume_in_a_new_process_builds_the_same_input(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    continued = _proc(db, "40", "what now?")
    resumed = _proc(db + ".copy", "0", "what now?")
    assert resumed == continued
    assert resumed[1][0] == "summary" and resumed[-1] == ["user", "what now?"]


async def test_every_input_stays_in_budget_with_a_summary_of_many_facts() -> None:
    """A summary is bounded (``summary_tokens``): it never pushes the input past budget."""
    memory = InMemoryMemory()
    policy = ContextPolicy(window_tokens=1000, summarizer=ExtractiveSummarizer(max_facts=500))
    agent, _ = _agent(memory, policy)
    events = await _run(agent, 40)
    contexts = [e for e in events if isinstance(e, ContextEvent)]
    assert any(e.summary_id for e in contexts)
    assert all(e.tokens <= 1000 for e in contexts), max(e.tokens for e in contexts)
    summary = (await memory.get(marks=SUMMARY_MARK))[-1]
    assert agent.context_builder.text_tokens(summary.get_text_content()) <= policy.summary_budget  # type: ignore[operator]
    assert "## Task" in summary.get_text_content() and "## Next steps" in summary.get_text_content()
