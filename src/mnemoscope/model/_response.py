"""What a chat model returns: :class:`ChatResponse` and streaming :class:`ChatChunk`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mnemoscope.message import (
    ContentBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    new_id,
)


class ChatUsage(BaseModel):
    """Token usage of one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    time: float = 0.0
    """Seconds the call took."""


class ChatResponse(BaseModel):
    """A complete model response: text, thinking and tool-use blocks."""

    id: str = Field(default_factory=new_id)
    content: list[ContentBlock] = Field(default_factory=list)
    usage: ChatUsage | None = None
    stop_reason: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_provider(
        cls,
        content: list[ContentBlock],
        *,
        usage: ChatUsage | None,
        stop_reason: str | None,
        response_id: str | None,
        model: str | None,
    ) -> ChatResponse:
        """A response as a provider sent it: its id when it gave one (a new id otherwise),
        and the model that answered as ``metadata["model"]`` when it named one."""
        kwargs: dict[str, Any] = {"id": response_id} if response_id else {}
        return cls(
            content=content,
            usage=usage,
            stop_reason=stop_reason,
            metadata={"model": model} if model else {},
            **kwargs,
        )

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def thinking(self) -> str:
        return "".join(b.thinking for b in self.content if isinstance(b, ThinkingBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]


class ChatChunk(BaseModel):
    """One piece of a streamed response.

    Deltas carry new text or thinking. The last chunk of every stream has ``final`` set
    to the complete :class:`ChatResponse` (tool calls are only reported there, whole).
    """

    kind: Literal["text", "thinking", "final"]
    delta: str = ""
    final: ChatResponse | None = None


ToolChoice = Literal["auto", "none", "required"] | str
"""``"auto"``, ``"none"``, ``"required"`` or the name of one tool to force."""
