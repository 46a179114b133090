"""The shape of a chat model over a provider SDK: build a request, send it, parse the reply.

:class:`~mnemoscope.model.OpenAIChatModel` and :class:`~mnemoscope.model.AnthropicChatModel`
differ only in their pure formatter (:class:`WireFormat`), their generation options and
the SDK call; one non-streamed and one streamed path serve both, so an SDK
error is turned into :class:`~mnemoscope.errors.ModelCallError` the same way in each.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol

from mnemoscope._http import SDKClientAdapter
from mnemoscope.message import Msg
from mnemoscope.model._base import ChatCall, ChatModelBase, ToolSchema
from mnemoscope.model._response import ChatChunk, ChatResponse, ToolChoice


class StreamAccumulator(Protocol):
    """Turns a provider's stream events into chunks, then into one response."""

    def feed(self, event: dict[str, Any], /) -> list[ChatChunk]: ...

    def finish(self) -> ChatResponse: ...


class WireFormat(NamedTuple):
    """A provider's pure formatter (no network): requests out, replies in."""

    messages: Callable[[list[Msg]], dict[str, Any]]
    """The request fields carrying the conversation (``messages``, ``system``, ...)."""
    tools: Callable[[Sequence[ToolSchema]], list[dict[str, Any]]]
    tool_choice: Callable[[ToolChoice | None], Any]
    """The tool choice on the wire; ``None`` leaves it out of the request."""
    parse: Callable[[dict[str, Any]], ChatResponse]
    """A non-streamed reply (as a dict) as a :class:`ChatResponse`."""
    accumulator: Callable[[], StreamAccumulator]
    """A fresh accumulator for one streamed reply."""


class SDKChatModel(SDKClientAdapter, ChatModelBase):
    """A chat model whose calls go through an async SDK client.

    Subclasses set :attr:`wire`, set up the client (:meth:`_open_client`) and implement
    :meth:`_options` and the SDK call (:meth:`_send`).

    Attributes:
        wire: the provider's formatter.
        generate_kwargs: sent with every call.
    """

    _repr_fields: ClassVar[tuple[str, ...]] = ("model", "base_url", "stream")
    wire: ClassVar[WireFormat]
    generate_kwargs: dict[str, Any]
    _sdk_error: ClassVar[str]
    """The name of the root of the SDK's exceptions (``"OpenAIError"``, ...)."""

    def build_request(self, call: ChatCall) -> dict[str, Any]:
        """The keyword arguments of the SDK's create call for one model call."""
        request: dict[str, Any] = {
            "model": self.model,
            **self.wire.messages(call.messages),
            **self._options(call.kwargs),
        }
        if call.tools:
            request["tools"] = self.wire.tools(call.tools)
            choice = self.wire.tool_choice(call.tool_choice)
            if choice is not None:
                request["tool_choice"] = choice
        return request

    @abstractmethod
    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The request fields from ``generate_kwargs`` and this call's keywords."""

    @abstractmethod
    async def _send(self, request: dict[str, Any]) -> Any:
        """The SDK's create call: a reply object, or an async stream of events."""

    def _stream_request(self, request: dict[str, Any]) -> None:
        """Switch ``request`` to streaming (subclasses add what their API needs)."""
        request["stream"] = True

    def _failures(self) -> tuple[type[Exception], ...]:
        # the SDK's own errors, and a reply the formatter cannot read
        return (getattr(self._sdk, self._sdk_error), ValueError, KeyError, TypeError)

    async def _call(self, call: ChatCall) -> ChatResponse:
        request = self.build_request(call)
        try:
            reply = await self._send(request)
            return self.wire.parse(reply.model_dump())
        except self._failures() as exc:
            raise self._error(exc) from exc

    async def _stream(self, call: ChatCall) -> AsyncIterator[ChatChunk]:
        request = self.build_request(call)
        self._stream_request(request)
        acc = self.wire.accumulator()
        try:
            stream = await self._send(request)
            try:
                async for event in stream:
                    for delta in acc.feed(event.model_dump()):
                        yield delta
            finally:
                await stream.close()
            final = acc.finish()
        except self._failures() as exc:
            raise self._error(exc) from exc
        yield ChatChunk(kind="final", final=final)
