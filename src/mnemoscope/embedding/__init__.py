"""Embedding models: the :class:`EmbeddingModelBase` contract and its providers.

``LocalEmbeddingModel`` (alias ``SentenceTransformerEmbedding``) needs the ``local``
extra; it is imported lazily, so ``import mnemoscope.embedding`` never loads torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mnemoscope.embedding._base import EmbeddingModelBase
from mnemoscope.embedding._dashscope import DashScopeEmbeddingModel
from mnemoscope.embedding._openai import OpenAIEmbeddingModel

if TYPE_CHECKING:
    from mnemoscope.embedding._local import LocalEmbeddingModel, SentenceTransformerEmbedding

__all__ = [
    "DashScopeEmbeddingModel",
    "EmbeddingModelBase",
    "LocalEmbeddingModel",
    "OpenAIEmbeddingModel",
    "SentenceTransformerEmbedding",
]

_LAZY = {"LocalEmbeddingModel", "SentenceTransformerEmbedding"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from mnemoscope.embedding import _local

        return getattr(_local, name)
    raise AttributeError(f"module 'mnemoscope.embedding' has no attribute {name!r}")
