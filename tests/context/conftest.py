"""Fixtures of the context-engineering tests: a short-term memory on each backend, a
scripted agent factory, and :func:`check_pairs`, the validator run over model inputs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.memory import InMemoryMemory, MemoryBase
from mnemoscope.message import Msg, ToolResultBlock, ToolUseBlock


def check_pairs(messages: list[Msg]) -> None:
    """Every model input: no duplicate message ids, no duplicate tool-use ids, every use
    answered by the very next message and every result answering the message before it."""
    ids = [m.id for m in messages]
    assert len(ids) == len(set(ids)), "duplicate message ids in a model input"
    seen_uses: set[str] = set()
    for i, m in enumerate(messages):
        uses = [b.id for b in m.content if isinstance(b, ToolUseBlock)]
        for u in uses:
            assert u not in seen_uses, f"duplicate tool-use id {u}"
            seen_uses.add(u)
        results = [b.id for b in m.content if isinstance(b, ToolResultBlock)]
        if results:
            prev = messages[i - 1] if i else None
            prev_uses = (
                {b.id for b in prev.content if isinstance(b, ToolUseBlock)} if prev else set()
            )
            for r in results:
                assert r in prev_uses, f"orphan tool result {r} at position {i}"
        if uses:
            assert i + 1 < len(messages), f"tool uses {uses} at the end of the input"
            nxt = {b.id for b in messages[i + 1].content if isinstance(b, ToolResultBlock)}
            assert set(uses) == nxt, f"tool uses {set(uses) - nxt} without results"


BACKENDS = ["inmemory", "sqlite", "redis", "postgres"]


@pytest.fixture
def make_memory(
    request: pytest.FixtureRequest, tmp_path: Path, unique_id: str
) -> Callable[[str], MemoryBase]:
    """``make_memory(backend, session="s")``: a fresh session store of that backend."""

    def make(backend: str, session: str = "s") -> MemoryBase:
        kw: dict[str, Any] = {"user_id": f"ctx-{unique_id}", "session_id": session}
        if backend == "inmemory":
            return InMemoryMemory(**kw)
        if backend == "redis":
            from mnemoscope.memory import RedisMemory

            return RedisMemory.from_url(request.getfixturevalue("redis_url"), **kw)
        from mnemoscope.memory import AsyncSQLAlchemyMemory

        url = (
            f"sqlite+aiosqlite:///{tmp_path / 'ctx.db'}"
            if backend == "sqlite"
            else request.getfixturevalue("postgres_url")
        )
        return AsyncSQLAlchemyMemory(url, **kw)

    return make


@pytest.fixture
async def memories() -> AsyncIterator[list[MemoryBase]]:
    """Memories to clear and close at the end of a test (append what you build)."""
    made: list[MemoryBase] = []
    yield made
    for m in made:
        await m.clear()
        await m.aclose()
