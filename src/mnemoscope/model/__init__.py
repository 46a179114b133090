"""Chat models: the :class:`ChatModelBase` contract and its providers.

The provider classes are imported on first access, so ``import mnemoscope.model`` does not
pay for importing the ``openai`` SDK until a provider is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mnemoscope.model._base import ChatModelBase, ToolSchema
from mnemoscope.model._openai_formatter import RAW_ARGUMENTS_KEY
from mnemoscope.model._response import ChatChunk, ChatResponse, ChatUsage, ToolChoice
from mnemoscope.model._tokens import count_tokens, estimate_tokens, tokenizer_name

if TYPE_CHECKING:
    from mnemoscope.model._anthropic import AnthropicChatModel
    from mnemoscope.model._dashscope import DashScopeChatModel
    from mnemoscope.model._openai import OpenAIChatModel

__all__ = [
    "RAW_ARGUMENTS_KEY",
    "AnthropicChatModel",
    "ChatChunk",
    "ChatModelBase",
    "ChatResponse",
    "ChatUsage",
    "DashScopeChatModel",
    "OpenAIChatModel",
    "ToolChoice",
    "ToolSchema",
    "count_tokens",
    "estimate_tokens",
    "tokenizer_name",
]

_LAZY = {
    "AnthropicChatModel": "mnemoscope.model._anthropic",
    "DashScopeChatModel": "mnemoscope.model._dashscope",
    "OpenAIChatModel": "mnemoscope.model._openai",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mnemoscope.model' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
