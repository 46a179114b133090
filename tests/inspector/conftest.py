"""Data for the inspector tests: two users' sessions, long-term memories and Markdown memory.

``populate(root, store_url)`` writes, for ``alice``: a session ``s1`` with a summary, a hint,
a tool call and its result (and a message with HTML in it), a long-term memory, and a
Markdown memory directory; for ``bob``: a session ``b1`` and one memory of his own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.memory import AsyncSQLAlchemyMemory, LocalLongTermMemory, MemoryBase
from mnemoscope.memory.markdown._files import render_memory_file
from mnemoscope.message import (
    AssistantMsg,
    HintBlock,
    Msg,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMsg,
)

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}


@dataclass
class World:
    store_url: str
    ltm_path: str
    workdir: str
    """A template with ``{user_id}``."""
    alice_ids: dict[str, str] = field(default_factory=dict)
    bob_ids: dict[str, str] = field(default_factory=dict)


def alice_session() -> tuple[list[Msg], dict[str, list[str]]]:
    """The messages of alice's session and the marks to give them (by message id)."""
    old1 = UserMsg("alice", "I live in Hangzhou.")
    old2 = AssistantMsg("agent", "Noted: Hangzhou.")
    summary = UserMsg(
        "context",
        "Summary: alice lives in Hangzhou.",
        metadata={"covers": [old1.id, old2.id]},
    )
    question = UserMsg("alice", "What is the weather? <script>alert(1)</script>")
    hint = UserMsg("hint", [HintBlock(hint="alice likes short answers", source="agentic_memory")])
    step = AssistantMsg(
        "agent",
        [
            TextBlock(text="Let me check."),
            ToolUseBlock(id="call_1", name="weather", input={"city": "Hangzhou"}),
        ],
    )
    result = UserMsg("tool", [ToolResultBlock(id="call_1", name="weather", output="sunny, 21 C")])
    answer = AssistantMsg("agent", "It is sunny in Hangzhou.")
    msgs = [old1, old2, summary, question, hint, step, result, answer]
    marks = {
        summary.id: ["summary"],
        hint.id: ["hint"],
        result.id: ["tool_result"],
        old1.id: ["compressed"],
        old2.id: ["compressed", "pinned"],
    }
    return msgs, marks


async def write_session(mem: MemoryBase, msgs: list[Msg], marks: dict[str, list[str]]) -> None:
    for m in msgs:
        await mem.add(m, marks=marks.get(m.id))


async def populate(root: Path, store_url: str | None = None) -> World:
    url = store_url or f"sqlite+aiosqlite:///{root / 'sessions.db'}"
    world = World(url, str(root / "ltm.db"), str(root / "work" / "{user_id}"))
    msgs, marks = alice_session()
    if url.startswith("redis"):
        from mnemoscope.memory import RedisMemory

        a: MemoryBase = RedisMemory.from_url(url, user_id="alice", session_id="s1")
        b: MemoryBase = RedisMemory.from_url(url, user_id="bob", session_id="b1")
    else:
        a = AsyncSQLAlchemyMemory(url, user_id="alice", session_id="s1")
        b = AsyncSQLAlchemyMemory(url, user_id="bob", session_id="b1")
    async with a, b:
        await a.clear()
        await b.clear()
        await write_session(a, msgs, marks)
        await b.add(UserMsg("bob", "bob's private question"))
    world.alice_ids = {
        "question": msgs[3].id,
        "summary": msgs[2].id,
        "old1": msgs[0].id,
        "answer": msgs[7].id,
    }
    async with LocalLongTermMemory(world.ltm_path) as ltm:
        r1 = await ltm.record("Alice prefers green tea.", user_id="alice")
        r2 = await ltm.record("Bob keeps bees on his roof.", user_id="bob")
    world.alice_ids["memory"] = r1.added[0].id
    world.bob_ids["memory"] = r2.added[0].id
    mem_dir = root / "work" / "alice" / "Memory"
    mem_dir.mkdir(parents=True)
    (mem_dir / "tea.md").write_text(
        render_memory_file("Tea", "what alice drinks", "user", "Green tea, no sugar.")
    )
    (mem_dir / "broken.md").write_text("no frontmatter here\n")
    (mem_dir / "MEMORY.md").write_text("- [Tea](tea.md) — drinks\n- [Gone](gone.md) — missing\n")
    (root / "work" / "bob" / "Memory").mkdir(parents=True)
    (root / "work" / "bob" / "Memory" / "MEMORY.md").write_text("")
    return world


@pytest.fixture
def make_world(tmp_path: Path) -> Callable[..., Coroutine[Any, Any, World]]:
    async def make(store_url: str | None = None) -> World:
        return await populate(tmp_path, store_url)

    return make


def populate_sync(root: Path) -> World:
    return asyncio.run(populate(root))


@pytest.fixture
def world_sync(tmp_path: Path) -> World:
    """The same data, written before the test starts (for tests without an event loop)."""
    return populate_sync(tmp_path)
