"""Chat models: the :class:`ChatModelBase` contract and its providers."""

from mnemoscope.model._base import ChatModelBase, ToolSchema
from mnemoscope.model._response import ChatChunk, ChatResponse, ChatUsage, ToolChoice
from mnemoscope.model._tokens import count_tokens, estimate_tokens, tokenizer_name

__all__ = [
    "ChatChunk",
    "ChatModelBase",
    "ChatResponse",
    "ChatUsage",
    "ToolChoice",
    "ToolSchema",
    "count_tokens",
    "estimate_tokens",
    "tokenizer_name",
]
