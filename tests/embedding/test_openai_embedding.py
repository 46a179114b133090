"""OpenAI and DashScope embeddings over real HTTP against OpenAICompatServer."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from mnemoscope.credential import DashScopeCredential
from mnemoscope.embedding import DashScopeEmbeddingModel, OpenAIEmbeddingModel
from mnemoscope.errors import ModelCallError, UserError
from mnemoscope.testing import OpenAICompatServer, hash_embedding

KEY = "sk-embed"


@pytest.fixture
async def server() -> AsyncIterator[OpenAICompatServer]:
    async with OpenAICompatServer(api_key=KEY, embedding_dimensions=48) as srv:
        yield srv


async def test_vectors_dimensions_and_request(server: OpenAICompatServer) -> None:
    model = OpenAIEmbeddingModel(
        "text-embedding-3-small", 256, api_key=KEY, base_url=server.base_url
    )
    texts = ["dark-mode charts", "我喜欢深色模式"]
    vectors = await model.embed(texts)
    assert [len(v) for v in vectors] == [256, 256]
    assert vectors == [hash_embedding(t, 256) for t in texts]  # the server's deterministic math
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-9) for v in vectors)
    [req] = server.requests
    assert req.path == "/v1/embeddings"
    assert req["input"] == texts and req["dimensions"] == 256
    assert req["encoding_format"] == "float"
    assert req.authorization == f"Bearer {KEY}"
    assert await model.embed_one("dark-mode charts") == vectors[0]
    await model.aclose()


async def test_dimensions_not_sent_to_models_without_support(server: OpenAICompatServer) -> None:
    model = OpenAIEmbeddingModel("nomic-embed-text", 48, api_key=KEY, base_url=server.base_url)
    assert len(await model.embed_one("x")) == 48
    assert "dimensions" not in server.requests[0]
    await model.aclose()


async def test_wrong_dimensions_is_reported(server: OpenAICompatServer) -> None:
    model = OpenAIEmbeddingModel("nomic-embed-text", 768, api_key=KEY, base_url=server.base_url)
    with pytest.raises(UserError, match=r"48-dimensional.*dimensions=768"):
        await model.embed(["x"])
    await model.aclose()


async def test_batching(server: OpenAICompatServer) -> None:
    model = OpenAIEmbeddingModel(
        "text-embedding-3-large", 16, api_key=KEY, base_url=server.base_url, batch_size=10
    )
    texts = [f"text number {i}" for i in range(25)]
    vectors = await model.embed(texts)
    assert vectors == [hash_embedding(t, 16) for t in texts]  # order kept across batches
    assert [len(r["input"]) for r in server.requests] == [10, 10, 5]
    assert await model.embed([]) == []
    await model.aclose()


async def test_http_error(server: OpenAICompatServer) -> None:
    model = OpenAIEmbeddingModel(
        "text-embedding-3-small", 8, api_key=KEY, base_url=server.base_url, max_retries=0
    )
    server.fail_next(500, "embedder down")
    with pytest.raises(ModelCallError, match="HTTP 500: embedder down"):
        await model.embed(["x"])
    await model.aclose()


async def test_dashscope_seed_construction(server: OpenAICompatServer) -> None:
    model = DashScopeEmbeddingModel(
        credential=DashScopeCredential(api_key=KEY, base_url=server.base_url),
        model="text-embedding-v4",
        dimensions=1536,
    )
    texts = [f"t{i}" for i in range(12)]
    vectors = await model.embed(texts)
    assert [len(v) for v in vectors] == [1536] * 12
    assert [len(r["input"]) for r in server.requests] == [10, 2]  # DashScope's batch limit
    assert all(
        r["dimensions"] == 1536 and r["model"] == "text-embedding-v4" for r in server.requests
    )
    await model.aclose()


def test_dashscope_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASHSCOPE_BASE_URL", raising=False)
    model = DashScopeEmbeddingModel(credential=DashScopeCredential(api_key=KEY))
    assert (model.model, model.dimensions) == ("text-embedding-v4", 1536)
    assert model.base_url == "https://dashscope.aliyuncs.com/compatible-mode/v1"
    with pytest.raises(UserError, match="batch_size"):
        DashScopeEmbeddingModel(credential=DashScopeCredential(api_key=KEY), batch_size=25)
    with pytest.raises(UserError, match="dimensions"):
        DashScopeEmbeddingModel(credential=DashScopeCredential(api_key=KEY), dimensions=0)
    with pytest.raises(UserError, match=r"got str; write DashScopeEmbeddingModel\(credential="):
        DashScopeEmbeddingModel("text-embedding-v4")  # type: ignore[arg-type]
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    with pytest.raises(UserError, match="DASHSCOPE_API_KEY"):
        DashScopeEmbeddingModel()
