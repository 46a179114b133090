"""Chat models: the :class:`ChatModelBase` contract and its providers."""

from mnemoscope.model._anthropic import AnthropicChatModel
from mnemoscope.model._base import ChatModelBase, ToolSchema
from mnemoscope.model._dashscope import DashScopeChatModel
from mnemoscope.model._openai import OpenAIChatModel
from mnemoscope.model._openai_formatter import RAW_ARGUMENTS_KEY
from mnemoscope.model._response import ChatChunk, ChatResponse, ChatUsage, ToolChoice
from mnemoscope.model._tokens import count_tokens, estimate_tokens, tokenizer_name

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
