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

from mnemoscope._http import DEFAULT_TIMEOUT, ClientOptions, SDKClientAdapter
from mnemoscope.credential import CredentialBase
from mnemoscope.errors import UserError
from mnemoscope.message import Msg
from mnemoscope.model._base import ChatCall, ChatModelBase, ToolSchema
from mnemoscope.model._response import ChatChunk, ChatResponse, ToolChoice
from mnemoscope.model._tokens import TokenCounter


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


class SDKChatOptions(ClientOptions, total=False):
    """The keyword options of :class:`SDKChatModel`'s constructor that a subclass putting
    other parameters first forwards unchanged (see :class:`~mnemoscope._http.ClientOptions`)."""

    generate_kwargs: dict[str, Any] | None
    token_counter: TokenCounter | None


class SDKChatModel(SDKClientAdapter, ChatModelBase):
    """A chat model whose calls go through an async SDK client.

    Subclasses set :attr:`wire` and implement :meth:`_client_builder` (the SDK client from
    a credential), :meth:`_options` and the SDK call (:meth:`_send`). The constructor's
    parameters are documented on each provider (``OpenAIChatModel``, ...).

    Attributes:
        wire: the provider's formatter.
        generate_kwargs: sent with every call.
    """

    _repr_fields: ClassVar[tuple[str, ...]] = ("model", "base_url", "stream")
    wire: ClassVar[WireFormat]
    generate_kwargs: dict[str, Any]
    _sdk_error: ClassVar[str]
    """The name of the root of the SDK's exceptions (``"OpenAIError"``, ...)."""

    def __init__(
        self,
        model: str,
        credential: CredentialBase | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        stream: bool = False,
        generate_kwargs: dict[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        client: Any | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        super().__init__(model, stream=stream, token_counter=token_counter)
        if not model or not isinstance(model, str):
            raise UserError(f"{type(self).__name__} needs a model name, got model={model!r}")
        self._sdk = self._import_sdk()
        self.generate_kwargs = dict(generate_kwargs or {})
        self._open_client(
            client=client,
            credential=credential,
            api_key=api_key,
            base_url=base_url,
            build=self._client_builder(timeout, max_retries),
        )

    def _import_sdk(self) -> Any:
        """The SDK module. An adapter over an optional SDK imports it here, so a missing
        one raises :class:`~mnemoscope.errors.MissingExtraError` at construction."""
        return self._sdk

    @abstractmethod
    def _client_builder(self, timeout: float, max_retries: int) -> Callable[[Any, str | None], Any]:
        """How the SDK client is built from a credential and a base URL (the ``build`` of
        :meth:`~mnemoscope._http.SDKClientAdapter._open_client`)."""

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
