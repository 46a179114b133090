"""A long session through every mechanism (compaction, recall, pins, stubs, offloading,
parallel calls): every model input passes the pair validator (issue 11, done-when)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mnemoscope.agent import Agent
from mnemoscope.context import (
    COMPRESSED_MARK,
    PINNED_MARK,
    SUMMARY_MARK,
    ContextPolicy,
    ExtractiveSummarizer,
)
from mnemoscope.memory import MemoryBase
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import ReadToolOutput, RecallTool, Toolkit, function_tool

from .conftest import check_pairs


@function_tool(is_read_only=True)
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key.
    """
    size = 6000 if key.endswith("big") else 40
    return f"value of {key}: " + "z" * size


@function_tool
def note(text: str) -> str:
    """Write a note (not concurrency-safe).

    Args:
        text: the note.
    """
    return "noted " + text


def _respond(call: object) -> object:
    messages = call.messages  # type: ignore[attr-defined]
    last = messages[-1]
    if last.tool_results:
        return "ok " + "talk " * 8
    turn = int(last.get_text_content().split()[1])
    if turn % 7 == 0:  # parallel read-only calls (one batch) then a serial one
        return [
            tool_call("lookup", key=f"{turn}-a"),
            tool_call("lookup", key=f"{turn}-big"),
            tool_call("note", text=f"n{turn}"),
        ]
    if turn % 11 == 0:
        return [tool_call("recall", query=f"turn {turn - 5}")]
    if turn % 13 == 0:
        return [tool_call("read_tool_output", message_id="nope", index=0)]
    return f"answer {turn} " + "talk " * 10


TURNS = {"inmemory": 500, "sqlite": 500, "redis": 150, "postgres": 150}


@pytest.mark.parametrize("backend", list(TURNS))
async def test_long_session_every_input_keeps_pairs(
    backend: str, make_memory: Callable[..., MemoryBase], memories: list[MemoryBase]
) -> None:
    memory = make_memory(backend)
    memories.append(memory)
    model = ScriptedChatModel(default=_respond)
    policy = ContextPolicy(
        window_tokens=3000,
        summarizer=ExtractiveSummarizer(),
        recall_tokens=300,
        clear_tool_results_after=2,
        pin_tokens=200,
    )
    agent = Agent(
        "assistant",
        "You are terse.",
        model,
        toolkit=Toolkit([lookup, note, RecallTool(), ReadToolOutput()]),
        memory=memory,
        context_policy=policy,
        max_history_messages=400,
    )
    for i in range(1, TURNS[backend] + 1):
        reply = await agent.reply(f"turn {i} " + "words " * 6)
        if i == 3:
            await memory.update_marks(reply.id, add=PINNED_MARK)
    for call in model.calls:
        check_pairs(call.messages)
    assert await memory.get(marks=SUMMARY_MARK) and await memory.get(marks=COMPRESSED_MARK)
    pinned = (await memory.get(marks=PINNED_MARK))[0]
    assert all(pinned.id in {m.id for m in c.messages} for c in model.calls[10:])
    # nothing deleted: every user turn is still stored
    assert sum(1 for m in await memory.get() if m.name == "user") == TURNS[backend]
