"""LocalLongTermMemory: scoping, writing, dedup, supersession, retrieval, management, TTL."""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory import LongTermMemoryBase
from mnemoscope.memory._local_ltm import LocalLongTermMemory
from mnemoscope.memory._ltm_text import fts_match, query_terms, rrf
from mnemoscope.message import UserMsg
from mnemoscope.testing import HashEmbeddingModel, ScriptedChatModel, hash_embedding

FACTS = [
    "Alice prefers dark mode in every app.",
    "Alice is allergic to peanuts.",
    "Alice plays the cello in a community orchestra.",
    "Alice's daughter is called Maya.",
]


@pytest.fixture
async def ltm():
    store = LocalLongTermMemory(":memory:", embedding_model=HashEmbeddingModel(dimensions=256))
    yield store
    await store.aclose()


def contents(items) -> list[str]:
    return [i.content for i in items]


# ---------------------------------------------------------------------- contract
async def test_is_a_long_term_memory_and_records_each_text(ltm: LocalLongTermMemory) -> None:
    assert isinstance(ltm, LongTermMemoryBase)
    result = await ltm.record(FACTS, user_id="alice")
    assert [e.event for e in result.events] == ["add"] * 4
    assert contents(result.added) == FACTS
    assert result.stored_anything
    assert all(i.user_id == "alice" and len(i.id) == 32 for i in result.added)
    assert contents(await ltm.list(user_id="alice")) == FACTS


async def test_retrieve_ranks_the_matching_memory_first(ltm: LocalLongTermMemory) -> None:
    await ltm.record(FACTS, user_id="alice")
    for mode in ("hybrid", "lexical", "dense"):
        hits = await ltm.retrieve(
            "Which instrument does she play, the cello?", user_id="alice", mode=mode
        )
        assert hits[0].content == FACTS[2], mode
        assert hits[0].score is not None
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(await ltm.retrieve("alice", user_id="alice", limit=2)) == 2
    assert await ltm.retrieve("   ", user_id="alice") == []


async def test_threshold_drops_weak_results(ltm: LocalLongTermMemory) -> None:
    await ltm.record(FACTS, user_id="alice")
    hits = await ltm.retrieve("peanuts allergy", user_id="alice", limit=4, threshold=0.9)
    assert contents(hits) == [FACTS[1]]
    dense = await ltm.retrieve("peanuts allergy", user_id="alice", mode="dense", threshold=0.99)
    assert dense == []


async def test_messages_keep_speaker_metadata_and_neighbours(ltm: LocalLongTermMemory) -> None:
    msgs = [
        UserMsg("Bob", "Guess where I went hiking last weekend?", metadata={"turn": 1}),
        UserMsg("Carol", "The Dolomites, with my sister.", metadata={"turn": 2}),
    ]
    result = await ltm.record(msgs, user_id="bob", metadata={"source": "chat"})
    second = result.added[1]
    assert second.metadata["speaker"] == "Carol"
    assert second.metadata["turn"] == 2 and second.metadata["source"] == "chat"
    # "hiking" only occurs in the previous turn: the answer is found through its context,
    # ranked below the turn that contains the word itself
    hits = await ltm.retrieve("hiking", user_id="bob", mode="lexical")
    assert contents(hits) == [
        "Guess where I went hiking last weekend?",
        "The Dolomites, with my sister.",
    ]
    async with LocalLongTermMemory(":memory:", context_window=0) as alone:
        await alone.record(msgs, user_id="bob")
        hits = await alone.retrieve("hiking", user_id="bob")
        assert contents(hits) == ["Guess where I went hiking last weekend?"]


async def test_occurred_at_is_indexed_and_returned(ltm: LocalLongTermMemory) -> None:
    when = datetime(2023, 5, 8, 13, 56)
    await ltm.record("Went to the support group.", user_id="u", occurred_at=when)
    await ltm.record("Painted a sunrise.", user_id="u", metadata={"occurred_at": "2022-07-01"})
    hits = await ltm.retrieve("what happened in May 2023", user_id="u", mode="lexical")
    assert contents(hits) == ["Went to the support group."]
    assert hits[0].metadata["occurred_at"] == when.isoformat()
    assert hits[0].occurred_at == when
    july = await ltm.retrieve("July 2022", user_id="u", mode="lexical")
    assert contents(july) == ["Painted a sunrise."]
    with pytest.raises(UserError, match="occurred_at"):
        await ltm.record("x", user_id="u", occurred_at="not a date")


# ---------------------------------------------------------------------- scoping
async def test_one_user_never_sees_another_users_memories(ltm: LocalLongTermMemory) -> None:
    await ltm.record("Alice's locker code is 4321.", user_id="alice")
    await ltm.record("Bob's locker code is 9876.", user_id="bob")
    for mode in ("hybrid", "lexical", "dense"):
        hits = await ltm.retrieve("locker code", user_id="bob", mode=mode, limit=10)
        assert contents(hits) == ["Bob's locker code is 9876."], mode
    assert await ltm.retrieve("locker code", user_id="carol") == []
    assert contents(await ltm.list(user_id="alice")) == ["Alice's locker code is 4321."]


async def test_agent_and_run_narrow_the_scope(ltm: LocalLongTermMemory) -> None:
    await ltm.record("travel: prefers aisle seats", user_id="u", agent_id="travel", run_id="r1")
    await ltm.record("travel: vegetarian meals", user_id="u", agent_id="travel", run_id="r2")
    await ltm.record("cooking: vegetarian recipes", user_id="u", agent_id="chef")
    assert len(await ltm.retrieve("vegetarian", user_id="u", limit=10, mode="lexical")) == 2
    for mode in ("lexical", "dense", "hybrid"):
        hits = await ltm.retrieve("vegetarian", user_id="u", agent_id="chef", mode=mode)
        assert contents(hits) == ["cooking: vegetarian recipes"], mode
        hits = await ltm.retrieve("travel", user_id="u", agent_id="travel", run_id="r1", mode=mode)
        assert contents(hits) == ["travel: prefers aisle seats"], mode
    assert len(await ltm.list(user_id="u", agent_id="travel")) == 2
    assert contents(await ltm.list(user_id="u", run_id="r2")) == ["travel: vegetarian meals"]


async def test_user_id_is_required(ltm: LocalLongTermMemory) -> None:
    with pytest.raises(UserError, match="user_id"):
        await ltm.record("x", user_id="")
    with pytest.raises(UserError, match="user_id"):
        await ltm.retrieve("x", user_id="")


# ---------------------------------------------------------------------- dedup
async def test_exact_duplicates_are_skipped(ltm: LocalLongTermMemory) -> None:
    first = await ltm.record("Alice likes green tea.", user_id="alice")
    again = await ltm.record(
        ["  alice LIKES green   tea ", "Alice likes green tea!"], user_id="alice"
    )
    assert [e.event for e in again.events] == ["skip", "skip"]
    assert all(e.item.id == first.added[0].id for e in again.events)
    assert "duplicate" in (again.events[0].reason or "")
    assert not again.stored_anything
    batch = await ltm.record(["Bob runs.", "bob runs"], user_id="bob")
    assert [e.event for e in batch.events] == ["add", "skip"]
    assert batch.events[1].item.id == batch.events[0].item.id
    # another scope is not a duplicate
    other = await ltm.record("Alice likes green tea.", user_id="alice", run_id="r9")
    assert [e.event for e in other.events] == ["add"]
    assert len(await ltm.list(user_id="alice")) == 2


async def test_near_duplicates_are_skipped_above_the_threshold() -> None:
    a = "alice likes green tea in the morning"
    b = "alice likes green tea in the morning too"
    c = "the quarterly tax forms are due in april"
    va, vb, vc = (hash_embedding(t, 256) for t in (a, b, c))
    sim_ab = sum(x * y for x, y in zip(va, vb, strict=True))
    sim_ac = sum(x * y for x, y in zip(va, vc, strict=True))
    threshold = (sim_ab + sim_ac) / 2
    assert sim_ac < threshold < sim_ab
    store = LocalLongTermMemory(
        ":memory:", embedding_model=HashEmbeddingModel(256), near_duplicate_threshold=threshold
    )
    async with store:
        await store.record(a, user_id="u")
        result = await store.record([b, c], user_id="u")
        assert [e.event for e in result.events] == ["skip", "add"]
        assert result.events[0].item.content == a
        assert "near duplicate" in (result.events[0].reason or "")
        in_batch = await store.record([b, b + "!"], user_id="v")
        assert [e.event for e in in_batch.events] == ["add", "skip"]
    loose = LocalLongTermMemory(
        ":memory:", embedding_model=HashEmbeddingModel(256), near_duplicate_threshold=None
    )
    async with loose:
        await loose.record(a, user_id="u")
        assert [e.event for e in (await loose.record(b, user_id="u")).events] == ["add"]


async def test_dedup_can_be_disabled() -> None:
    async with LocalLongTermMemory(":memory:", dedup=False) as store:
        result = await store.record(["same", "same"], user_id="u")
        assert [e.event for e in result.events] == ["add", "add"]


# ---------------------------------------------------------------------- inference
def _supersede_paris(call) -> dict:
    text = call.text()
    alias = re.search(r"- (m\d+): Alice lives in Paris", text)
    assert alias, text
    return {
        "facts": [
            {"text": "Alice lives in Berlin.", "supersedes": [alias.group(1), "m99"]},
            {"text": "Alice started learning German."},
        ]
    }


async def test_infer_extracts_facts_and_supersedes_with_one_call() -> None:
    model = ScriptedChatModel([_supersede_paris])
    store = LocalLongTermMemory(":memory:", embedding_model=HashEmbeddingModel(), chat_model=model)
    async with store:
        old = (await store.record("Alice lives in Paris.", user_id="alice")).added[0]
        await store.record("Bob lives in Paris.", user_id="bob")
        convo = [
            UserMsg("alice", "I moved to Berlin last month!"),
            UserMsg("assistant", "Congratulations! Learning German?"),
            UserMsg("alice", "Yes, I started classes."),
        ]
        result = await store.record(convo, user_id="alice", infer=True)
        assert len(model.calls) == 1
        prompt = model.calls[0].text()
        assert "I moved to Berlin last month!" in prompt
        assert "Bob lives in Paris" not in prompt  # other users' memories are never shown
        assert [e.event for e in result.events] == ["update", "add"]
        new = result.events[0].item
        assert new.content == "Alice lives in Berlin." and new.metadata["inferred"] is True
        assert old.id in (result.events[0].reason or "")

        hits = await store.retrieve("Where does Alice live?", user_id="alice", limit=5)
        assert "Alice lives in Paris." not in contents(hits)
        assert "Alice lives in Berlin." in contents(hits)
        both = await store.retrieve(
            "Where does Alice live?", user_id="alice", limit=5, include_superseded=True
        )
        assert {"Alice lives in Paris.", "Alice lives in Berlin."} <= set(contents(both))

        kept = await store.get(old.id)
        assert kept is not None and kept.status == "superseded" and kept.superseded_by == new.id
        assert [h.event for h in await store.history(old.id)] == ["add", "supersede"]
        assert contents(await store.list(user_id="alice")) == [
            "Alice lives in Berlin.",
            "Alice started learning German.",
        ]
        assert len(await store.list(user_id="alice", include_superseded=True)) == 3


async def test_infer_with_nothing_to_remember_and_duplicate_facts() -> None:
    model = ScriptedChatModel(
        [{"facts": []}, {"facts": [{"text": "Alice likes tea."}, {"text": "alice likes tea"}]}]
    )
    store = LocalLongTermMemory(":memory:", chat_model=model, infer=True)
    async with store:
        assert (await store.record("hi!", user_id="a")).events == []
        result = await store.record("I like tea", user_id="a")
        assert [e.event for e in result.events] == ["add", "skip"]
        assert contents(await store.list(user_id="a")) == ["Alice likes tea."]


async def test_infer_needs_a_chat_model() -> None:
    with pytest.raises(UserError, match="chat_model"):
        LocalLongTermMemory(":memory:", infer=True)
    async with LocalLongTermMemory(":memory:") as store:
        with pytest.raises(UserError, match="chat_model"):
            await store.record("x", user_id="u", infer=True)


# ---------------------------------------------------------------------- management
async def test_get_update_delete_and_history(ltm: LocalLongTermMemory) -> None:
    item = (await ltm.record("Alice plays the violin.", user_id="alice")).added[0]
    assert (await ltm.get(item.id)).content == "Alice plays the violin."  # type: ignore[union-attr]
    assert await ltm.get("nope") is None

    updated = await ltm.update(item.id, "Alice plays the viola.", metadata={"v": 2})
    assert updated.id == item.id and updated.content == "Alice plays the viola."
    assert updated.metadata["v"] == 2
    for mode in ("lexical", "dense"):
        assert contents(await ltm.retrieve("viola", user_id="alice", mode=mode)) == [
            "Alice plays the viola."
        ]
    assert await ltm.retrieve("violin", user_id="alice", mode="lexical") == []
    with pytest.raises(KeyError):
        await ltm.update("nope", "x")
    with pytest.raises(UserError):
        await ltm.update(item.id, "  ")

    assert await ltm.delete(item.id) is True
    assert await ltm.delete(item.id) is False
    assert await ltm.get(item.id) is None
    assert await ltm.retrieve("viola", user_id="alice") == []
    history = await ltm.history(item.id)
    assert [h.event for h in history] == ["add", "update", "delete"]
    assert (history[1].old_content, history[1].new_content) == (
        "Alice plays the violin.",
        "Alice plays the viola.",
    )
    assert history[2].old_content == "Alice plays the viola."
    assert await ltm.history("nope") == []


async def test_list_pagination(ltm: LocalLongTermMemory) -> None:
    await ltm.record([f"fact number {i}" for i in range(7)], user_id="u")
    assert contents(await ltm.list(user_id="u", limit=3, offset=2)) == [
        "fact number 2",
        "fact number 3",
        "fact number 4",
    ]
    assert len(await ltm.list(user_id="u")) == 7


async def test_erase_user_removes_memories_and_history(ltm: LocalLongTermMemory) -> None:
    a = (await ltm.record(FACTS, user_id="alice")).added
    await ltm.record("Bob likes chess.", user_id="bob")
    assert await ltm.erase_user("alice") == 4
    assert await ltm.list(user_id="alice", include_superseded=True, include_expired=True) == []
    assert await ltm.retrieve("cello", user_id="alice") == []
    assert await ltm.history(a[0].id) == []
    assert contents(await ltm.retrieve("chess", user_id="bob")) == ["Bob likes chess."]
    assert await ltm.erase_user("alice") == 0


async def test_ttl_hides_then_purges_expired_memories() -> None:
    async with LocalLongTermMemory(":memory:", ttl=timedelta(hours=1)) as store:
        keep = (await store.record("Long-lived reminder about taxes.", user_id="u")).added[0]
        brief = await store.record("Short-lived reminder about taxes.", user_id="u", ttl=0.2)
        gone = brief.added[0]
        assert keep.expires_at is not None and gone.expires_at is not None
        assert gone.expires_at < keep.expires_at
        await asyncio.sleep(0.4)  # let the short TTL pass (no timing is asserted)
        assert contents(await store.retrieve("reminder taxes", user_id="u")) == [
            "Long-lived reminder about taxes."
        ]
        assert contents(await store.list(user_id="u")) == ["Long-lived reminder about taxes."]
        assert len(await store.list(user_id="u", include_expired=True)) == 2
        assert await store.get(gone.id) is None
        assert (await store.get(gone.id, include_expired=True)) is not None
        # an expired memory is not a duplicate: the same text can be stored again
        again = await store.record("Short-lived reminder about taxes.", user_id="u", ttl=60)
        assert [e.event for e in again.events] == ["add"]
        assert await store.purge_expired() == 1
        assert await store.get(gone.id, include_expired=True) is None
        assert [h.event for h in await store.history(gone.id)] == ["add", "delete"]
        assert (await store.history(gone.id))[1].reason == "expired"
    with pytest.raises(UserError, match="ttl"):
        LocalLongTermMemory(":memory:", ttl=0)


# ---------------------------------------------------------------------- modes and config
async def test_lexical_only_without_an_embedder(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="mnemoscope.memory._local_ltm"):
        store = LocalLongTermMemory(":memory:")
    assert sum("lexical-only" in r.getMessage() for r in caplog.records) == 1
    async with store:
        await store.record(FACTS, user_id="alice")
        hits = await store.retrieve("Is she allergic to peanuts?", user_id="alice")
        assert hits[0].content == FACTS[1]
        with pytest.raises(UserError, match="embedding_model"):
            await store.retrieve("x", user_id="alice", mode="dense")
    with pytest.raises(UserError, match="embedding_model"):
        LocalLongTermMemory(":memory:", search_mode="dense")


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"search_mode": "fuzzy"}, "search_mode"),
        ({"dense_weight": -1}, "dense_weight"),
        ({"near_duplicate_threshold": 1.5}, "near_duplicate_threshold"),
        ({"candidates": 0}, "candidates"),
    ],
)
def test_misconfiguration_names_the_parameter(kwargs: dict, name: str) -> None:
    with pytest.raises(UserError, match=name):
        LocalLongTermMemory(":memory:", **kwargs)


async def test_queries_with_fts_syntax_are_taken_literally(ltm: LocalLongTermMemory) -> None:
    await ltm.record('He wrote "C++ AND NOT rust" (col:1) * ^', user_id="u")
    for q in ['"C++ AND NOT rust"', "col:1 *", "NEAR(a b)", "^", "'; DROP TABLE x; --"]:
        await ltm.retrieve(q, user_id="u", mode="lexical")
    assert contents(await ltm.retrieve("rust NOT", user_id="u", mode="lexical"))


def test_query_helpers() -> None:
    assert query_terms("What did Caroline do in May?") == ["caroline", "may"]
    assert query_terms("what is it") == ["what", "is", "it"]  # all stopwords: keep them
    assert fts_match('say "hi"') == '"hi"'
    assert fts_match("?!") is None
    fused = rrf([([1, 2, 3], 1.0), ([3, 1], 0.5)], k=20)
    assert [row for row, _ in fused] == [1, 3, 2]


# ---------------------------------------------------------------------- files
async def test_persists_in_one_file_and_sees_other_connections(tmp_path: Path) -> None:
    path = tmp_path / "ltm.db"
    a = LocalLongTermMemory(path, embedding_model=HashEmbeddingModel(64))
    b = LocalLongTermMemory(path, embedding_model=HashEmbeddingModel(64))
    async with a, b:
        await a.record("Alice keeps bees.", user_id="alice")
        assert contents(await b.retrieve("bees", user_id="alice", mode="dense")) == [
            "Alice keeps bees."
        ]
        await a.record("Alice keeps a beehive diary.", user_id="alice")  # b's cache is stale
        assert len(await b.retrieve("bees beehive", user_id="alice", mode="dense")) == 2
    async with LocalLongTermMemory(path) as reopened:
        assert len(await reopened.list(user_id="alice")) == 2
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_different_embedder_is_refused_until_reembed(tmp_path: Path) -> None:
    path = tmp_path / "ltm.db"
    async with LocalLongTermMemory(path, embedding_model=HashEmbeddingModel(32)) as store:
        await store.record("Alice keeps bees.", user_id="alice")
    other = LocalLongTermMemory(path, embedding_model=HashEmbeddingModel(64))
    async with other:
        with pytest.raises(UserError, match="reembed"):
            await other.retrieve("bees", user_id="alice")
        assert contents(await other.retrieve("bees", user_id="alice", mode="lexical"))
        assert await other.reembed() == 1
        hits = await other.retrieve("bees", user_id="alice", mode="dense")
        assert contents(hits) == ["Alice keeps bees."]


async def test_closed_store_refuses_work_and_close_is_idempotent() -> None:
    store = LocalLongTermMemory(":memory:")
    await store.record("x y z", user_id="u")
    await store.aclose()
    await store.aclose()
    with pytest.raises(MemoryStoreError, match="closed"):
        await store.list(user_id="u")


async def test_infer_also_shows_the_newest_memories_when_no_word_is_shared() -> None:
    model = ScriptedChatModel([_supersede_paris])
    async with LocalLongTermMemory(":memory:", chat_model=model, infer_related=3) as store:
        for text in ("Alice likes jazz.", "Alice lives in Paris.", "Alice owns a cat."):
            await store.record(text, user_id="alice")
        await store.record("Bob lives in Paris.", user_id="bob")
        # lexical-only, and no word in common with "Alice lives in Paris."
        result = await store.record("I moved to Berlin!", user_id="alice", infer=True)
        assert [e.event for e in result.events] == ["update", "add"]
        prompt = model.calls[0].text()
        assert prompt.count("- m") == 3 and "Bob" not in prompt
