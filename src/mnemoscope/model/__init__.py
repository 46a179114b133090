"""Chat models: the :class:`ChatModelBase` contract and its providers.

The provider classes are imported on first access, so ``import mnemoscope.model`` does not
pay for importing the ``openai`` SDK until a provider is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mnemoscope._lazy import lazy_exports
from mnemoscope.model._anthropic_formatter import format_anthropic_messages
from mnemoscope.model._base import ChatCall, ChatModelBase, ToolSchema
from mnemoscope.model._openai_formatter import RAW_ARGUMENTS_KEY, format_openai_messages
from mnemoscope.model._response import ChatChunk, ChatResponse, ChatUsage, ToolChoice
from mnemoscope.model._tokens import (
    HUGE_TEXT_CHARS,
    TokenCounter,
    count_tokens,
    estimate_tokens,
    fast_estimate_tokens,
    tokenizer_name,
)

if TYPE_CHECKING:
    from mnemoscope.model._anthropic import AnthropicChatModel
    from mnemoscope.model._dashscope import DashScopeChatModel
    from mnemoscope.model._openai import OpenAIChatModel

__all__ = [
    "HUGE_TEXT_CHARS",
    "RAW_ARGUMENTS_KEY",
    "AnthropicChatModel",
    "ChatCall",
    "ChatChunk",
    "ChatModelBase",
    "ChatResponse",
    "ChatUsage",
    "DashScopeChatModel",
    "OpenAIChatModel",
    "TokenCounter",
    "ToolChoice",
    "ToolSchema",
    "count_tokens",
    "estimate_tokens",
    "fast_estimate_tokens",
    "format_anthropic_messages",
    "format_openai_messages",
    "tokenizer_name",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AnthropicChatModel": "mnemoscope.model._anthropic",
        "DashScopeChatModel": "mnemoscope.model._dashscope",
        "OpenAIChatModel": "mnemoscope.model._openai",
    },
)
