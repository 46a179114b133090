"""Mem0LongTermMemory's management calls (list, get, update, delete, history) with the real
mem0ai package, a local Qdrant path and the offline hash embedder; no LLM runs (every
memory is recorded with ``infer=False``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC
from pathlib import Path

import pytest

# imported before mem0: it turns mem0's telemetry off (no network in tests)
from mnemoscope.memory import HistoryEntry, Mem0LongTermMemory, MemoryItem

pytest.importorskip("mem0", reason="the 'mem0' extra (mem0ai) is not installed")

import mem0

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.testing import HashEmbeddingModel, ScriptedChatModel

MISSING = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Mem0LongTermMemory]:
    mem = Mem0LongTermMemory(
        chat_model=ScriptedChatModel(),
        embedding_model=HashEmbeddingModel(64),
        path=str(tmp_path / "qdrant"),
    )
    yield mem
    await mem.aclose()


async def remember(store: Mem0LongTermMemory, text: str, user_id: str, **scope: str) -> str:
    result = await store.record(text, user_id=user_id, infer=False, **scope)
    return result.added[0].id


async def test_get_and_list_return_the_users_memories_as_memory_items(
    store: Mem0LongTermMemory,
) -> None:
    tea = await remember(store, "Alice prefers green tea.", "alice", agent_id="chef")
    await remember(store, "Alice lives in Paris.", "alice", agent_id="guide")
    await remember(store, "Bob keeps bees.", "bob")

    item = await store.get(tea, user_id="alice")
    assert isinstance(item, MemoryItem)
    assert (item.id, item.content, item.user_id, item.agent_id) == (
        tea,
        "Alice prefers green tea.",
        "alice",
        "chef",
    )
    assert item.created_at is not None and item.created_at.tzinfo is UTC

    everything = await store.list(user_id="alice")
    assert sorted(i.content for i in everything) == [
        "Alice lives in Paris.",
        "Alice prefers green tea.",
    ]
    assert [i.content for i in await store.list(user_id="alice", agent_id="chef")] == [
        "Alice prefers green tea."
    ]
    assert [i.content for i in await store.list(user_id="bob")] == ["Bob keeps bees."]
    assert await store.list(user_id="carol") == []


async def test_list_pages_through_mem0s_order(store: Mem0LongTermMemory) -> None:
    for n in range(5):
        await remember(store, f"Fact number {n}.", "alice")
    everything = await store.list(user_id="alice")
    assert len(everything) == 5
    pages = [await store.list(user_id="alice", limit=2, offset=o) for o in (0, 2, 4)]
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [i.id for p in pages for i in p] == [i.id for i in everything]
    assert await store.list(user_id="alice", limit=0) == []
    with pytest.raises(UserError, match="limit and offset must be >= 0"):
        await store.list(user_id="alice", offset=-1)


async def test_an_unlimited_list_returns_more_than_one_mem0_page(
    store: Mem0LongTermMemory,
) -> None:
    await store.record([f"Memory {n}." for n in range(130)], user_id="alice", infer=False)
    assert len(await store.list(user_id="alice")) == 130  # more than the first get_all asks


async def test_update_replaces_the_text_re_embeds_it_and_keeps_the_old_one_in_history(
    store: Mem0LongTermMemory,
) -> None:
    tea = await remember(store, "Alice prefers green tea.", "alice")
    updated = await store.update(tea, "  Alice prefers oolong.  ", user_id="alice")
    assert (updated.id, updated.content) == (tea, "Alice prefers oolong.")
    assert (await store.get(tea, user_id="alice")) == updated
    assert [i.id for i in await store.retrieve("oolong", user_id="alice")] == [tea]

    history = await store.history(tea, user_id="alice")
    assert all(isinstance(h, HistoryEntry) for h in history)
    assert [(h.event, h.old_content, h.new_content) for h in history] == [
        ("add", None, "Alice prefers green tea."),
        ("update", "Alice prefers green tea.", "Alice prefers oolong."),
    ]
    assert history[0].at <= history[1].at and history[1].at.tzinfo is UTC


async def test_update_merges_metadata_into_mem0s(store: Mem0LongTermMemory) -> None:
    result = await store.record(
        "Alice prefers green tea.", user_id="alice", infer=False, metadata={"topic": "drinks"}
    )
    tea = result.added[0].id
    updated = await store.update(tea, "Alice prefers oolong.", user_id="alice", metadata={"x": 1})
    assert updated.metadata["topic"] == "drinks" and updated.metadata["x"] == 1


async def test_an_empty_update_is_refused_and_nothing_is_written(
    store: Mem0LongTermMemory,
) -> None:
    tea = await remember(store, "Alice prefers green tea.", "alice")
    with pytest.raises(UserError, match="non-empty content; use delete"):
        await store.update(tea, "   ", user_id="alice")
    item = await store.get(tea, user_id="alice")
    assert item is not None and item.content == "Alice prefers green tea."
    assert [h.event for h in await store.history(tea, user_id="alice")] == ["add"]


async def test_delete_removes_the_memory_and_its_history_needs_include_deleted(
    store: Mem0LongTermMemory,
) -> None:
    tea = await remember(store, "Alice prefers green tea.", "alice")
    assert await store.delete(tea, user_id="alice") is True
    assert await store.get(tea, user_id="alice") is None
    assert await store.list(user_id="alice") == []
    assert await store.delete(tea, user_id="alice") is False  # already gone
    with pytest.raises(KeyError):
        await store.update(tea, "Alice prefers oolong.", user_id="alice")
    # mem0 records no owner: a deleted memory's history is shown only when asked for
    assert await store.history(tea, user_id="alice") == []
    kept = await store.history(tea, user_id="alice", include_deleted=True)
    assert [(h.event, h.old_content) for h in kept] == [
        ("add", None),
        ("delete", "Alice prefers green tea."),
    ]


async def test_another_users_memory_is_not_found_and_stays_unchanged(
    store: Mem0LongTermMemory,
) -> None:
    tea = await remember(store, "Alice prefers green tea.", "alice")
    assert await store.get(tea, user_id="bob") is None
    assert await store.history(tea, user_id="bob") == []
    assert await store.history(tea, user_id="bob", include_deleted=True) == []  # it exists
    with pytest.raises(KeyError):
        await store.update(tea, "hacked", user_id="bob")
    assert await store.delete(tea, user_id="bob") is False

    item = await store.get(tea, user_id="alice")
    assert item is not None and item.content == "Alice prefers green tea."
    assert [h.event for h in await store.history(tea, user_id="alice")] == ["add"]


@pytest.mark.parametrize("memory_id", [MISSING, "not-a-uuid", "", "../../etc"])
async def test_a_missing_or_malformed_id_is_not_found(
    store: Mem0LongTermMemory, memory_id: str
) -> None:
    await remember(store, "Alice prefers green tea.", "alice")
    assert await store.get(memory_id, user_id="alice") is None
    assert await store.history(memory_id, user_id="alice", include_deleted=True) == []
    assert await store.delete(memory_id, user_id="alice") is False
    with pytest.raises(KeyError):
        await store.update(memory_id, "Alice prefers oolong.", user_id="alice")


async def test_an_expired_memory_is_left_out_unless_asked_for(
    store: Mem0LongTermMemory,
) -> None:
    tea = await remember(store, "Alice prefers green tea.", "alice")
    await store.client.update(tea, expiration_date="2000-01-01")  # mem0's own expiry
    assert await store.get(tea, user_id="alice") is None
    assert await store.list(user_id="alice") == []
    kept = await store.get(tea, user_id="alice", include_expired=True)
    assert kept is not None and kept.metadata["expiration_date"] == "2000-01-01"
    assert [i.id for i in await store.list(user_id="alice", include_expired=True)] == [tea]


async def test_every_call_needs_a_user_id(store: Mem0LongTermMemory) -> None:
    tea = await remember(store, "Alice prefers green tea.", "alice")
    for call in (
        store.get(tea, user_id=""),
        store.list(user_id="  "),
        store.history(tea, user_id=""),
        store.update(tea, "x", user_id=""),
        store.delete(tea, user_id=""),
    ):
        with pytest.raises(UserError, match="needs a non-empty user_id"):
            await call


async def test_a_closed_store_refuses_management_calls(tmp_path: Path) -> None:
    store = Mem0LongTermMemory(
        chat_model=ScriptedChatModel(),
        embedding_model=HashEmbeddingModel(64),
        path=str(tmp_path / "qdrant"),
    )
    await store.aclose()
    with pytest.raises(MemoryStoreError, match="closed"):
        await store.list(user_id="alice")


async def test_the_hosted_platform_is_refused_with_what_to_do() -> None:
    client = mem0.AsyncMemoryClient.__new__(mem0.AsyncMemoryClient)  # no network needed
    store = Mem0LongTermMemory(client=client)
    with pytest.raises(UserError, match=r"open-source mem0\.AsyncMemory.*Platform dashboard"):
        await store.get(MISSING, user_id="alice")
    with pytest.raises(UserError, match=r"list\(\) works on the open-source"):
        await store.list(user_id="alice")
