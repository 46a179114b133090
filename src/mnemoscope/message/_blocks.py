"""Content blocks: the typed pieces a :class:`~mnemoscope.message.Msg` is made of.

Blocks are pydantic models told apart by their ``type`` field, so a list of blocks
round-trips through JSON without losing which kind each one is.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextBlock(_Block):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Block):
    """Model reasoning that is shown but not treated as the answer."""

    type: Literal["thinking"] = "thinking"
    thinking: str


class ToolUseBlock(_Block):
    """A request by the model to call a tool."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class URLSource(_Block):
    type: Literal["url"] = "url"
    url: str


class Base64Source(_Block):
    type: Literal["base64"] = "base64"
    media_type: str
    data: str


class ImageBlock(_Block):
    """An image, by URL or inline base64 data."""

    type: Literal["image"] = "image"
    source: Annotated[URLSource | Base64Source, Field(discriminator="type")]


ToolResultState = Literal["success", "error", "denied", "interrupted"]


class ToolResultBlock(_Block):
    """The result of a tool call, matched to its :class:`ToolUseBlock` by ``id``."""

    type: Literal["tool_result"] = "tool_result"
    id: str
    name: str
    output: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] = ""
    state: ToolResultState = "success"
    metadata: dict[str, Any] = Field(default_factory=dict)
    """What the tool reported besides its output (``ToolResult.metadata``: a file's version,
    a match count), JSON values only. Stored with the message and shown to the application
    (events, the inspector); never sent to the model."""

    @property
    def is_error(self) -> bool:
        """True when the call failed or was denied."""
        return self.state in ("error", "denied", "interrupted")

    def output_text(self) -> str:
        """The textual part of the output."""
        if isinstance(self.output, str):
            return self.output
        return "\n".join(b.text for b in self.output if isinstance(b, TextBlock))


class HintBlock(_Block):
    """Context injected by the framework (e.g. retrieved memories), not typed by the user.

    Attributes:
        hint: the text shown to the model.
        source: who injected it (``"agentic_memory"``, ``"mem0"``, ...).
    """

    type: Literal["hint"] = "hint"
    hint: str
    source: str | None = None


ContentBlock = Annotated[
    TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock | HintBlock | ImageBlock,
    Field(discriminator="type"),
]
"""Any content block; the ``type`` field selects the class."""
