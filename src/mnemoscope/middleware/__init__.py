"""Agent middleware: onion hooks around the agent loop; long-term memory is middleware."""

from __future__ import annotations

from typing import Any

from mnemoscope.events import (
    AgentEvent,
    CompactionEvent,
    ContextEvent,
    HintInjectedEvent,
    MemoryEvent,
    PermissionEvent,
    ReasoningStartEvent,
    ReplyEndEvent,
    ReplyStartEvent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from mnemoscope.middleware._base import HOOK_NAMES, CompressHandler, MiddlewareBase
from mnemoscope.middleware._context import (
    ActingContext,
    ExitReason,
    ModelCallContext,
    ReasoningContext,
    ReplyContext,
)
from mnemoscope.middleware._view import AgentStateView, AgentView

_LAZY = {
    "AgenticMemoryMiddleware": "mnemoscope.middleware._agentic_memory",
    "Mem0Middleware": "mnemoscope.middleware._mem0",
    "LongTermMemoryMiddleware": "mnemoscope.middleware._long_term",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mnemoscope.middleware' has no attribute {name!r}")


__all__ = [
    "HOOK_NAMES",
    "ActingContext",
    "AgentEvent",
    "AgentStateView",
    "AgentView",
    "AgenticMemoryMiddleware",
    "CompactionEvent",
    "CompressHandler",
    "ContextEvent",
    "ExitReason",
    "HintInjectedEvent",
    "LongTermMemoryMiddleware",
    "Mem0Middleware",
    "MemoryEvent",
    "MiddlewareBase",
    "ModelCallContext",
    "PermissionEvent",
    "ReasoningContext",
    "ReasoningStartEvent",
    "ReplyContext",
    "ReplyEndEvent",
    "ReplyStartEvent",
    "TextDeltaEvent",
    "ThinkingDeltaEvent",
    "ToolResultEvent",
    "ToolUseEvent",
]
