"""Events yielded by ``Agent.reply_stream`` (and by every onion hook)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mnemoscope.message import HintBlock, Msg, ToolResultBlock, ToolUseBlock


class _Event(BaseModel):
    """What every event has: its ``type`` (the discriminator, one per class) and the id
    of the reply that emitted it (set by ``ReplyContext.emit``)."""

    model_config = ConfigDict(extra="forbid")
    reply_id: str = ""


class ReplyStartEvent(_Event):
    """Always the first event; carries the user message the reply answers."""

    type: Literal["reply_start"] = "reply_start"
    input: Msg


class ReasoningStartEvent(_Event):
    """A reasoning step (one model call) starts; ``iteration`` counts from 1."""

    type: Literal["reasoning_start"] = "reasoning_start"
    iteration: int


class TextDeltaEvent(_Event):
    """A piece of the answer as the model streams it (the whole message follows)."""

    type: Literal["text_delta"] = "text_delta"
    delta: str


class ThinkingDeltaEvent(_Event):
    """A piece of the model's reasoning as it streams (shown, not part of the answer)."""

    type: Literal["thinking_delta"] = "thinking_delta"
    delta: str


class ToolUseEvent(_Event):
    """The model asked for a tool call (emitted before permission and execution)."""

    type: Literal["tool_use"] = "tool_use"
    tool_use: ToolUseBlock


class PermissionEvent(_Event):
    """The permission engine's decision on one tool call (emitted for asks and denials)."""

    type: Literal["permission"] = "permission"
    tool_use_id: str
    tool_name: str
    behavior: Literal["allow", "deny", "ask"]
    approved: bool | None = None
    message: str = ""


class ToolResultEvent(_Event):
    """A tool call finished, was denied or was interrupted; ``result`` is what the model
    sees."""

    type: Literal["tool_result"] = "tool_result"
    result: ToolResultBlock


class HintInjectedEvent(_Event):
    """A hint queued with ``ReplyContext.add_hint`` was shown to the model."""

    type: Literal["hint_injected"] = "hint_injected"
    hint: HintBlock


class MemoryEvent(_Event):
    """Long-term memory activity: retrieval injected, write done, or a failure."""

    type: Literal["memory"] = "memory"
    source: str
    action: Literal["retrieve", "write", "error"]
    message: str = ""
    data: dict[str, Any] = Field(default_factory=dict)


class ContextEvent(_Event):
    """The composition of one model input, emitted right before every model call, with
    a token budget or without one.

    Attributes:
        iteration: the reasoning step.
        tokens: tokens of the whole input (the sum of ``parts``, by the model's counter).
        parts: tokens per part (``system``, ``summary``, ``pinned``, ``history``,
            ``recalled``, ``injected``, ``current``, ``transcript``, ``notice``). With no
            budget nothing is dropped, pinned apart or recalled: ``pinned``,
            ``recalled`` and ``notice`` are 0 and ``dropped`` is empty.
        kept, dropped, compacted, offloaded, recalled, pinned: message ids.
        summary_id: the summary shown, if any.
        prefix_changes: how often the prefix (system prompt + summary) changed between
            consecutive model calls of this agent so far (a prompt-cache miss each).
    """

    type: Literal["context"] = "context"
    iteration: int = 0
    tokens: int = 0
    parts: dict[str, int] = Field(default_factory=dict)
    kept: list[str] = Field(default_factory=list)
    dropped: list[str] = Field(default_factory=list)
    compacted: list[str] = Field(default_factory=list)
    offloaded: list[str] = Field(default_factory=list)
    recalled: list[str] = Field(default_factory=list)
    pinned: list[str] = Field(default_factory=list)
    summary_id: str | None = None
    prefix_changes: int = 0


class CompactionEvent(_Event):
    """A compaction: done (``summary_id`` covers ``covered``), skipped by a middleware, or
    failed (``error`` says why; nothing was changed and the budget drops history)."""

    type: Literal["compaction"] = "compaction"
    status: Literal["done", "skipped", "failed"]
    summary_id: str | None = None
    covered: list[str] = Field(default_factory=list)
    error: str = ""
    background: bool = False


class ReplyEndEvent(_Event):
    """Always the last event; carries the reply message."""

    type: Literal["reply_end"] = "reply_end"
    msg: Msg
    exit_reason: Literal["done", "max_iters"] = "done"


AgentEvent = Annotated[
    ReplyStartEvent
    | ReasoningStartEvent
    | TextDeltaEvent
    | ThinkingDeltaEvent
    | ToolUseEvent
    | PermissionEvent
    | ToolResultEvent
    | HintInjectedEvent
    | MemoryEvent
    | ContextEvent
    | CompactionEvent
    | ReplyEndEvent,
    Field(discriminator="type"),
]
