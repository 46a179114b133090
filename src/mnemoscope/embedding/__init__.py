"""Embedding models: the :class:`EmbeddingModelBase` contract and its providers.

Providers are imported on first access: ``import mnemoscope.embedding`` loads neither the
``openai`` SDK nor torch. ``LocalEmbeddingModel`` (alias ``SentenceTransformerEmbedding``)
needs the ``local`` extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mnemoscope.embedding._base import EmbeddingModelBase

if TYPE_CHECKING:
    from mnemoscope.embedding._dashscope import DashScopeEmbeddingModel
    from mnemoscope.embedding._local import LocalEmbeddingModel, SentenceTransformerEmbedding
    from mnemoscope.embedding._openai import OpenAIEmbeddingModel

__all__ = [
    "DashScopeEmbeddingModel",
    "EmbeddingModelBase",
    "LocalEmbeddingModel",
    "OpenAIEmbeddingModel",
    "SentenceTransformerEmbedding",
]

_LAZY = {
    "DashScopeEmbeddingModel": "mnemoscope.embedding._dashscope",
    "LocalEmbeddingModel": "mnemoscope.embedding._local",
    "OpenAIEmbeddingModel": "mnemoscope.embedding._openai",
    "SentenceTransformerEmbedding": "mnemoscope.embedding._local",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mnemoscope.embedding' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
