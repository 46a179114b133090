"""The typed events a reply yields (``Agent.reply_stream``), one pydantic model each.

They sit just above ``message`` so that every layer that reports progress (tools, memory
stores, the context engine, middleware) can build them without depending on the layers
that consume them. ``mnemoscope.middleware`` re-exports every name here.
"""

from __future__ import annotations

from mnemoscope.events._events import (
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

__all__ = [
    "AgentEvent",
    "CompactionEvent",
    "ContextEvent",
    "HintInjectedEvent",
    "MemoryEvent",
    "PermissionEvent",
    "ReasoningStartEvent",
    "ReplyEndEvent",
    "ReplyStartEvent",
    "TextDeltaEvent",
    "ThinkingDeltaEvent",
    "ToolResultEvent",
    "ToolUseEvent",
]
