"""The ``compact_context`` tool (issue 11, item 2): the model compacts at a task boundary,
through the same non-destructive path as automatic compaction."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence

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
from mnemoscope.errors import UserError
from mnemoscope.events import CompactionEvent, ContextEvent, ToolResultEvent
from mnemoscope.memory import MemoryBase
from mnemoscope.message import Msg
from mnemoscope.middleware import AgentEvent, MiddlewareBase
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import COMPACT_TOOL, CompactTool, Toolkit, function_tool

from .conftest import BACKENDS, check_pairs


@function_tool(is_read_only=True)
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key.
    """
    return f"value of {key}"


def _agent(
    memory: MemoryBase, summarizer: SummarizerBase | None = None, **kw: object
) -> tuple[Agent, ScriptedChatModel]:
    """Reply 1 does a task with two parallel lookups; reply 2 finishes it with a lookup
    and the compaction in one step (both calls pending while the tool runs)."""
    model = ScriptedChatModel(
        [
            [tool_call("lookup", key="a"), tool_call("lookup", key="b")],
            "task one done",
            [tool_call("lookup", key="c"), tool_call(COMPACT_TOOL)],
            "task two done, compacted",
        ],
        default="fine",
    )
    agent = Agent(
        "assistant",
        "You are terse.",
        model,
        toolkit=Toolkit([lookup, CompactTool()]),
        memory=memory,
        context_policy=ContextPolicy(
            window_tokens=8000, summarizer=summarizer or ExtractiveSummarizer()
        ),
        **kw,  # type: ignore[arg-type]
    )
    return agent, model


async def _reply(agent: Agent, text: str) -> list[AgentEvent]:
    return [e async for e in agent.reply_stream(text)]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_tool_compacts_finished_turns_and_keeps_everything_stored(
    backend: str, make_memory: Callable[..., MemoryBase], memories: list[MemoryBase]
) -> None:
    memory = make_memory(backend)
    memories.append(memory)
    agent, model = _agent(memory)
    await _reply(agent, "task one: look up a and b")
    events = await _reply(agent, "task two: look up c, then tidy up")
    stored_before = await memory.get()
    first_reply_ids = [m.id for m in stored_before[:4]]  # user, step, results, answer
    task_two = stored_before[4]
    (done,) = [e for e in events if isinstance(e, CompactionEvent)]
    assert done.status == "done"
    # covered: the first task and the second task's message; never the running step
    assert done.covered == [*first_reply_ids, task_two.id]
    (summary,) = await memory.get(marks=SUMMARY_MARK)
    assert summary.id == done.summary_id and summary.metadata[COVERS_KEY] == done.covered
    compressed = {m.id for m in await memory.get(marks=COMPRESSED_MARK)}
    assert compressed == set(done.covered)
    # nothing deleted: every message is still stored
    assert {m.id for m in stored_before} <= {m.id for m in await memory.get()}
    # the tool answers with what it covered
    (result,) = [
        e.result for e in events if isinstance(e, ToolResultEvent) and e.result.name == COMPACT_TOOL
    ]
    assert result.state != "error"
    assert "Compacted 5 messages" in result.output_text()
    assert summary.id in result.output_text()
    # the next call of the same reply sees the summary, not what it covers; the step that
    # called the tool keeps both of its results
    after = model.calls[3].messages
    check_pairs(after)
    assert after[1].name == "summary"
    shown = {m.id for m in after}
    assert not shown & set(first_reply_ids)
    step = next(m for m in after if m.tool_uses)
    assert {b.name for b in step.tool_uses} == {"lookup", COMPACT_TOOL}
    # the reply's ContextEvent reports the compaction
    contexts = [e for e in events if isinstance(e, ContextEvent)]
    assert contexts[-1].summary_id == summary.id and contexts[-1].compacted == done.covered


@pytest.mark.parametrize("backend", BACKENDS)
async def test_after_the_tool_a_new_agent_on_the_session_builds_summary_plus_tail(
    backend: str, make_memory: Callable[..., MemoryBase], memories: list[MemoryBase]
) -> None:
    memory = make_memory(backend)
    memories.append(memory)
    agent, _ = _agent(memory)
    await _reply(agent, "task one: look up a and b")
    await _reply(agent, "task two: look up c, then tidy up")
    # a fresh agent (and, on a server or file store, a fresh connection) on the session
    again = memory if backend == "inmemory" else make_memory(backend)
    if again is not memory:
        memories.append(again)
    fresh, model = _agent(again)
    await _reply(fresh, "what now?")
    seen = model.calls[0].messages
    check_pairs(seen)
    assert [m.name for m in seen[:2]] == ["system", "summary"]
    # the tail: the step that called the tool, its results, the answer, then the question
    assert {b.name for b in seen[2].tool_uses} == {"lookup", COMPACT_TOOL}
    assert seen[3].tool_results and seen[4].get_text_content() == "task two done, compacted"
    assert seen[-1].get_text_content() == "what now?"


class _Down(SummarizerBase):
    async def summarize(self, msgs: Sequence[Msg], previous: Msg | None) -> str:
        raise RuntimeError("summariser down")


@pytest.mark.parametrize("backend", ["inmemory", "sqlite"])
async def test_a_failed_summary_is_a_tool_error_and_changes_nothing(
    backend: str,
    make_memory: Callable[..., MemoryBase],
    memories: list[MemoryBase],
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = make_memory(backend)
    memories.append(memory)
    agent, model = _agent(memory, _Down())
    await _reply(agent, "task one: look up a and b")
    caplog.set_level(logging.WARNING, logger="mnemoscope.context")
    events = await _reply(agent, "task two: look up c, then tidy up")
    (record,) = caplog.records
    assert "summariser down" in record.getMessage() and COMPACT_TOOL in record.getMessage()
    (failed,) = [e for e in events if isinstance(e, CompactionEvent)]
    assert failed.status == "failed" and "summariser down" in failed.error
    result = next(
        e.result for e in events if isinstance(e, ToolResultEvent) and e.result.name == COMPACT_TOOL
    )
    assert result.state == "error"
    text = result.output_text()
    assert "summariser down" in text and "nothing was changed" in text
    assert await memory.get(marks=SUMMARY_MARK) == []
    assert await memory.get(marks=COMPRESSED_MARK) == []
    # the model goes on with the whole conversation
    after = model.calls[3].messages
    check_pairs(after)
    assert len(after) == 1 + 4 + 1 + 2  # system, reply one, task two, its step and results


class _Titled(MiddlewareBase):
    def __init__(self) -> None:
        self.seen: list[int] = []

    async def on_compress_context(
        self,
        ctx: CompactionContext,
        next_handler: Callable[[CompactionContext], AsyncIterator[AgentEvent]],
    ) -> AsyncIterator[AgentEvent]:
        self.seen.append(len(ctx.msgs))
        ctx.summary_text = "## Task\nlook things up"
        async for event in next_handler(ctx):
            yield event


async def test_the_tool_goes_through_on_compress_context(
    make_memory: Callable[..., MemoryBase], memories: list[MemoryBase]
) -> None:
    memory = make_memory("inmemory")
    memories.append(memory)
    titled = _Titled()
    agent, _ = _agent(memory, middlewares=[titled])
    await _reply(agent, "task one: look up a and b")
    await _reply(agent, "task two: look up c, then tidy up")
    assert titled.seen == [5]
    (summary,) = await memory.get(marks=SUMMARY_MARK)
    assert summary.get_text_content() == "## Task\nlook things up"


def test_the_tool_without_a_summariser_is_refused_at_construction() -> None:
    with pytest.raises(UserError, match=r"needs a summariser.*ContextPolicy\(summarizer="):
        Agent("a", "s", ScriptedChatModel(["x"]), toolkit=Toolkit([CompactTool()]))
