"""Embedding models: the :class:`EmbeddingModelBase` contract and its providers.

Providers are imported on first access: ``import mnemoscope.embedding`` loads neither the
``openai`` SDK nor onnxruntime nor torch. Local, offline embedders:

- ``LocalEmbeddingModel``: all-MiniLM-L6-v2, through onnxruntime (``OnnxEmbeddingModel``,
  the ``local`` extra, no torch) or sentence-transformers (``SentenceTransformerEmbedding``,
  the ``local-torch`` extra).
- ``StaticEmbeddingModel``: a static (model2vec) embedder distilled from it by
  ``build_static_embedder`` (``mnemoscope ltm build-embedder``); numpy only at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mnemoscope._lazy import lazy_exports
from mnemoscope.embedding._base import EmbeddingModelBase

if TYPE_CHECKING:
    from mnemoscope.embedding._dashscope import DashScopeEmbeddingModel
    from mnemoscope.embedding._local import LocalEmbeddingModel
    from mnemoscope.embedding._onnx import DEFAULT_LOCAL_MODEL, OnnxEmbeddingModel
    from mnemoscope.embedding._openai import OpenAIEmbeddingModel
    from mnemoscope.embedding._static import StaticEmbeddingModel
    from mnemoscope.embedding._static_build import build_static_embedder, static_model_name
    from mnemoscope.embedding._torch import SentenceTransformerEmbedding

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "DashScopeEmbeddingModel",
    "EmbeddingModelBase",
    "LocalEmbeddingModel",
    "OnnxEmbeddingModel",
    "OpenAIEmbeddingModel",
    "SentenceTransformerEmbedding",
    "StaticEmbeddingModel",
    "build_static_embedder",
    "static_model_name",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DEFAULT_LOCAL_MODEL": "mnemoscope.embedding._onnx",
        "static_model_name": "mnemoscope.embedding._static_build",
        "DashScopeEmbeddingModel": "mnemoscope.embedding._dashscope",
        "LocalEmbeddingModel": "mnemoscope.embedding._local",
        "OnnxEmbeddingModel": "mnemoscope.embedding._onnx",
        "OpenAIEmbeddingModel": "mnemoscope.embedding._openai",
        "SentenceTransformerEmbedding": "mnemoscope.embedding._torch",
        "StaticEmbeddingModel": "mnemoscope.embedding._static",
        "build_static_embedder": "mnemoscope.embedding._static_build",
    },
)
