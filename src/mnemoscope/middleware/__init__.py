"""Agent middleware: onion hooks around the agent loop; long-term memory is middleware."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mnemoscope._lazy import lazy_exports
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

if TYPE_CHECKING:
    from mnemoscope.middleware._agentic_memory import AgenticMemoryMiddleware
    from mnemoscope.middleware._long_term import LongTermMemoryMiddleware
    from mnemoscope.middleware._mem0 import Mem0Middleware

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AgenticMemoryMiddleware": "mnemoscope.middleware._agentic_memory",
        "Mem0Middleware": "mnemoscope.middleware._mem0",
        "LongTermMemoryMiddleware": "mnemoscope.middleware._long_term",
    },
)


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
