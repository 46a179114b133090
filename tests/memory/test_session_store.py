"""``SessionStoreMemory`` over third-party ``SessionStore`` objects: what it asks of the
store, and what happens when the store is wrong or fails. (The whole short-term memory
contract also runs over it: the ``protocol`` backend of ``conftest.py``.)"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.agent import Agent
from mnemoscope.errors import CorruptRecordError, MemoryStoreError, UserError
from mnemoscope.memory import SessionStore, SessionStoreMemory, StoredMsg
from mnemoscope.message import UserMsg
from mnemoscope.testing import ScriptedChatModel

from .conftest import JsonLinesSessionStore


class CountingStore(JsonLinesSessionStore):
    """The JSON-lines store, counting which operations it was asked for."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.calls: list[str] = []
        self.fail: str | None = None

    async def load(self, user_id: str, session_id: str) -> list[dict[str, Any]]:
        self.calls.append("load")
        return await super().load(user_id, session_id)

    async def append(self, user_id: str, session_id: str, entries: Sequence[StoredMsg]) -> None:
        self.calls.append("append")
        if self.fail == "append":
            raise ConnectionError("the document database went away")
        await super().append(user_id, session_id, entries)

    async def rewrite(self, user_id: str, session_id: str, entries: Sequence[StoredMsg]) -> None:
        self.calls.append("rewrite")
        if self.fail == "rewrite":
            raise ConnectionError("the document database went away")
        await super().rewrite(user_id, session_id, entries)


def test_a_store_without_the_three_operations_is_refused() -> None:
    class Half:
        async def load(self, user_id: str, session_id: str) -> list[StoredMsg]:
            return []

    assert not isinstance(Half(), SessionStore)
    with pytest.raises(UserError, match=r"Half lacks append, rewrite; implement async load"):
        SessionStoreMemory(Half())  # type: ignore[arg-type]


async def test_new_turns_are_appended_and_only_changes_rewrite(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    mem = SessionStoreMemory(store, user_id="alice", session_id="s")
    a, b = UserMsg("alice", "a"), UserMsg("alice", "b")
    await mem.add(a)
    await mem.add([a, b])  # a is a duplicate (ignored): only b is appended
    await mem.update_marks(b.id, add="hint")
    await mem.update_marks(b.id, add="hint")  # no change: nothing written
    assert [c for c in store.calls if c != "load"] == ["append", "append", "rewrite"]
    lines = store.path_of("alice", "s").read_text().splitlines()
    assert len(lines) == 2 and '"hint"' in lines[1]


async def test_a_failing_store_is_a_memory_store_error_and_loses_nothing(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    mem = SessionStoreMemory(store, user_id="alice", session_id="s")
    kept = UserMsg("alice", "kept")
    await mem.add(kept, marks="pinned")
    for op, call in (
        ("append", lambda: mem.add(UserMsg("alice", "lost"))),
        ("rewrite", lambda: mem.delete(kept.id)),
    ):
        store.fail = op
        with pytest.raises(MemoryStoreError, match=r"CountingStore failed to .*went away"):
            await call()
    store.fail = None
    assert await mem.get() == [kept] and await mem.get_marks(kept.id) == ["pinned"]


async def test_invalid_entries_are_skipped_and_never_dropped_by_a_rewrite(tmp_path: Path) -> None:
    store = JsonLinesSessionStore(tmp_path)
    mem = SessionStoreMemory(store, user_id="alice", session_id="s")
    good = UserMsg("alice", "good")
    await mem.add(good)
    path = store.path_of("alice", "s")
    with path.open("a") as f:
        f.write('{"msg": {"id": "broken-1", "role": "nobody"}, "marks": []}\n')
    assert await mem.get() == [good]
    assert [e.record_id for e in mem.corrupt_records] == ["broken-1"]
    with pytest.raises(CorruptRecordError, match="broken-1"):
        await mem.get(on_corrupt="raise")
    await mem.add(UserMsg("alice", "appending still works"))
    with pytest.raises(MemoryStoreError, match=r"1 entries that are not valid.*'broken-1'"):
        await mem.delete(good.id)
    assert "broken-1" in path.read_text() and await mem.size() == 2


async def test_an_agent_resumes_its_conversation_from_the_store(tmp_path: Path) -> None:
    model = ScriptedChatModel(["Noted: tea.", "You like tea."])
    first = Agent(
        name="a",
        system_prompt="",
        model=model,
        memory=SessionStoreMemory(JsonLinesSessionStore(tmp_path), user_id="u", session_id="s"),
    )
    await first.reply("I like tea.")
    again = Agent(
        name="a",
        system_prompt="",
        model=model,
        memory=SessionStoreMemory(JsonLinesSessionStore(tmp_path), user_id="u", session_id="s"),
    )
    await again.reply("What do I like?")
    shown = [m.get_text_content() for m in model.calls[1].messages]
    assert "I like tea." in shown and "Noted: tea." in shown
