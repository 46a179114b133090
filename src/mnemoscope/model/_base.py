"""The chat model contract every provider implements."""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict, TypeVar

import pydantic

from mnemoscope.errors import ValidationError
from mnemoscope.message import Msg, TextBlock, ThinkingBlock, UserMsg
from mnemoscope.model._response import ChatChunk, ChatResponse, ToolChoice
from mnemoscope.model._tokens import TokenCounter, count_tokens

_M = TypeVar("_M", bound=pydantic.BaseModel)


class ToolSchema(TypedDict):
    """A provider-neutral tool description handed to :meth:`ChatModelBase.__call__`."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class ChatCall:
    """One model call: what the model is given (built by :meth:`ChatModelBase.stream_chunks`,
    handed to :meth:`ChatModelBase._call` or :meth:`ChatModelBase._stream`).

    Attributes:
        messages: the conversation.
        tools: the tools the model may call.
        tool_choice: ``"auto"``, ``"none"``, ``"required"``, a tool's name, or ``None``
            (the provider's default).
        kwargs: the call's extra keywords (generation options).
    """

    messages: list[Msg]
    tools: list[ToolSchema]
    tool_choice: ToolChoice | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


class ChatModelBase(ABC):
    """An async chat model.

    Subclasses implement :meth:`_call` (one complete response to a :class:`ChatCall`) and
    may implement :meth:`_stream` (chunks over the wire, used when ``stream=True``).

    Args:
        model: the provider's model name.
        stream: ask the provider to stream the response over the wire.
        token_counter: counts tokens of a text; defaults to :func:`count_tokens`.

    Attributes:
        supports_json_mode: the provider accepts ``response_format={"type": "json_object"}``
            (OpenAI-compatible JSON mode) as a call keyword; callers that want JSON (mem0's
            fact extraction) forward it only then and otherwise ask in the prompt alone.
    """

    supports_json_mode: ClassVar[bool] = False

    def __init__(
        self,
        model: str,
        *,
        stream: bool = False,
        token_counter: TokenCounter | None = None,
    ) -> None:
        self.model = model
        self.stream = stream
        self._token_counter = token_counter or count_tokens

    # ------------------------------------------------------------------ calling
    async def __call__(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSchema] | None = None,
        tool_choice: ToolChoice | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        """Call the model and return the complete response."""
        final: ChatResponse | None = None
        async for chunk in self.stream_chunks(messages, tools, tool_choice, **kwargs):
            if chunk.final is not None:
                final = chunk.final
        assert final is not None, "stream_chunks must end with a final chunk"
        return final

    async def stream_chunks(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSchema] | None = None,
        tool_choice: ToolChoice | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatChunk]:
        """Yield text/thinking deltas, then one ``final`` chunk with the full response."""
        started = time.perf_counter()
        call = ChatCall(list(messages), list(tools or []), tool_choice, kwargs)
        if self.stream:
            async for chunk in self._stream(call):
                if chunk.final is not None and chunk.final.usage is not None:
                    chunk.final.usage.time = time.perf_counter() - started
                yield chunk
            return
        response = await self._call(call)
        if response.usage is not None:
            response.usage.time = time.perf_counter() - started
        for block in response.content:
            if isinstance(block, ThinkingBlock) and block.thinking:
                yield ChatChunk(kind="thinking", delta=block.thinking)
            elif isinstance(block, TextBlock) and block.text:
                yield ChatChunk(kind="text", delta=block.text)
        yield ChatChunk(kind="final", final=response)

    @abstractmethod
    async def _call(self, call: ChatCall) -> ChatResponse:
        """One non-streamed call."""

    async def _stream(self, call: ChatCall) -> AsyncIterator[ChatChunk]:
        """Streamed call; the default falls back to one :meth:`_call`."""
        response = await self._call(call)
        if response.text:
            yield ChatChunk(kind="text", delta=response.text)
        yield ChatChunk(kind="final", final=response)

    # ------------------------------------------------------- structured output
    async def generate_structured_output(
        self,
        messages: Sequence[Msg],
        structured_model: type[_M],
        *,
        retries: int = 1,
        **kwargs: Any,
    ) -> _M:
        """Ask the model for an instance of ``structured_model``.

        Implemented by forcing a call to a tool whose input schema is the model's JSON
        schema. When the arguments do not validate, the model is shown the error and asked
        again up to ``retries`` times; then :class:`~mnemoscope.errors.ValidationError`.
        """
        tool_name = structured_model.__name__
        schema: ToolSchema = {
            "name": tool_name,
            "description": (structured_model.__doc__ or f"Return a {tool_name}.").strip(),
            "input_schema": structured_model.model_json_schema(),
        }
        history = list(messages)
        last_error = ""
        for _ in range(retries + 1):
            response = await self(history, tools=[schema], tool_choice=tool_name, **kwargs)
            candidates = [b.input for b in response.tool_uses if b.name == tool_name]
            if not candidates and response.text.strip():
                try:
                    candidates = [json.loads(_strip_fences(response.text))]
                except json.JSONDecodeError:
                    candidates = []
            if not candidates:
                last_error = f"the model did not call {tool_name!r}"
            else:
                try:
                    return structured_model.model_validate(candidates[0])
                except pydantic.ValidationError as exc:
                    last_error = str(exc)
            history = [
                *history,
                UserMsg(
                    "user",
                    f"Your last answer was not a valid {tool_name}: {last_error}. "
                    f"Call the {tool_name!r} tool with arguments matching its schema.",
                ),
            ]
        raise ValidationError(
            f"{type(self).__name__}({self.model!r}) gave no valid {tool_name}: {last_error}"
        )

    # ------------------------------------------------------------------ tokens
    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` for this model (exact where a tokenizer is available)."""
        return self._token_counter(text)

    async def aclose(self) -> None:
        """Release network resources. Safe to call twice."""

    async def close(self) -> None:
        """The same as :meth:`aclose`: every mnemoscope resource answers to both spellings."""
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, stream={self.stream})"


def _strip_fences(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text
