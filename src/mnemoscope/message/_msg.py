"""The :class:`Msg` model and helpers to build one."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from mnemoscope.errors import ValidationError
from mnemoscope.message._blocks import (
    ContentBlock,
    HintBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

Role = Literal["user", "assistant", "system"]
MSG_SCHEMA_VERSION = 1
_B = TypeVar("_B", bound=BaseModel)


def new_id() -> str:
    """A new random message id (32 hex characters)."""
    return uuid.uuid4().hex


def _now() -> datetime:
    return datetime.now(UTC)


class Msg(BaseModel):
    """One message of a conversation.

    ``content`` is a list of content blocks; a plain string is accepted and stored as a
    single :class:`TextBlock`. ``Msg.model_validate_json(m.model_dump_json()) == m``
    always holds; :meth:`from_json` wraps decoding errors in a clear
    :class:`~mnemoscope.errors.ValidationError`.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=new_id)
    name: str
    role: Role
    content: list[ContentBlock] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    timestamp: datetime = Field(default_factory=_now)
    version: int = MSG_SCHEMA_VERSION

    @field_validator("content", mode="before")
    @classmethod
    def _coerce_content(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [TextBlock(text=value)]
        if isinstance(value, BaseModel):
            return [value]
        return value

    # ----------------------------------------------------------------- accessors
    def get_text_content(self, separator: str = "\n") -> str:
        """The text of all :class:`TextBlock` s joined by ``separator``."""
        return separator.join(b.text for b in self.content if isinstance(b, TextBlock))

    def get_content_blocks(self, block_type: type[_B]) -> list[_B]:
        """The blocks of one class, in order."""
        return [b for b in self.content if isinstance(b, block_type)]

    def has_content_blocks(self, block_type: type[BaseModel]) -> bool:
        return any(isinstance(b, block_type) for b in self.content)

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return self.get_content_blocks(ToolUseBlock)

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        return self.get_content_blocks(ToolResultBlock)

    @property
    def hints(self) -> list[HintBlock]:
        return self.get_content_blocks(HintBlock)

    @property
    def thinking(self) -> str:
        return "\n".join(b.thinking for b in self.content if isinstance(b, ThinkingBlock))

    # --------------------------------------------------------------- (de)coding
    def to_json(self) -> str:
        """The message as compact JSON; storage backends keep exactly this."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> Msg:
        """Decode a message, raising :class:`ValidationError` with the reason if malformed."""
        try:
            return cls.model_validate_json(data)
        except pydantic.ValidationError as exc:
            raise ValidationError(f"not a valid Msg JSON document: {_summarise(exc)}") from exc


def _summarise(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


Content = str | list[Any] | BaseModel


def UserMsg(name: str, content: Content, **kwargs: Any) -> Msg:  # noqa: N802 (seed API)
    """A message from a user: ``UserMsg("alice", "hello")``."""
    return Msg(name=name, role="user", content=content, **kwargs)  # type: ignore[arg-type]  # coerced by validator


def AssistantMsg(name: str, content: Content, **kwargs: Any) -> Msg:  # noqa: N802
    """A message from an assistant (or injected as one, e.g. ``name="memory"``)."""
    return Msg(name=name, role="assistant", content=content, **kwargs)  # type: ignore[arg-type]  # coerced by validator


def SystemMsg(content: Content, name: str = "system", **kwargs: Any) -> Msg:  # noqa: N802
    """A system message (instructions)."""
    return Msg(name=name, role="system", content=content, **kwargs)  # type: ignore[arg-type]  # coerced by validator


def as_msg(value: Msg | str, *, name: str = "user") -> Msg:
    """Accept a :class:`Msg` or a string wherever a user message is expected."""
    if isinstance(value, Msg):
        return value
    if isinstance(value, str):
        return UserMsg(name, value)
    raise ValidationError(
        f"expected a Msg or a str as the user message, got {type(value).__name__}"
    )
