"""Claude models over the Anthropic Messages API (extra ``anthropic``).

Example::

    from mnemoscope.message import UserMsg
    from mnemoscope.model import AnthropicChatModel

    model = AnthropicChatModel("claude-sonnet-4-5")          # key from $ANTHROPIC_API_KEY
    thinking = AnthropicChatModel(
        "claude-sonnet-4-5",
        generate_kwargs={
            "max_tokens": 8000,
            "thinking": {"type": "enabled", "budget_tokens": 4000},
        },
    )
    response = await model([UserMsg("alice", "Hello!")])
    await model.aclose()

The ``anthropic`` package is imported when the model is constructed; without it a
:class:`~mnemoscope.errors.MissingExtraError` names the extra to install.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from mnemoscope._http import DEFAULT_TIMEOUT, model_call_error
from mnemoscope._optional import require
from mnemoscope._redact import redact_url
from mnemoscope.credential import AnthropicCredential
from mnemoscope.errors import ModelCallError, UserError
from mnemoscope.message import Msg
from mnemoscope.model._anthropic_formatter import (
    AnthropicStreamAccumulator,
    format_anthropic_messages,
    format_anthropic_tool_choice,
    format_anthropic_tools,
    parse_anthropic_response,
)
from mnemoscope.model._base import ChatModelBase, ToolSchema
from mnemoscope.model._response import ChatChunk, ChatResponse, ToolChoice
from mnemoscope.model._tokens import TokenCounter

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` sent when ``generate_kwargs`` does not set it (the API requires one)."""


class AnthropicChatModel(ChatModelBase):
    """A Claude model.

    Args:
        model: e.g. ``"claude-sonnet-4-5"``.
        credential: key and endpoint; by default from ``api_key``/``base_url`` or
            ``$ANTHROPIC_API_KEY``/``$ANTHROPIC_BASE_URL``.
        api_key: shortcut for ``AnthropicCredential(api_key=...)``.
        base_url: overrides the credential's endpoint (without ``/v1``).
        stream: stream responses over the wire.
        generate_kwargs: sent with every call (``max_tokens``, ``temperature``,
            ``thinking``, ...).
        timeout: seconds per HTTP request.
        max_retries: SDK retries on transient errors.
        client: an ``anthropic.AsyncAnthropic`` to use (not closed by :meth:`aclose`).
        token_counter: counts tokens of a text.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        credential: AnthropicCredential | None = None,
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
        self._sdk = require("anthropic", extra="anthropic", feature="AnthropicChatModel")
        if credential is not None and api_key is not None:
            raise UserError("AnthropicChatModel: pass either credential= or api_key=, not both")
        self.generate_kwargs = dict(generate_kwargs or {})
        self._owns_client = client is None
        if client is not None:
            self.credential = credential
            self.base_url: str | None = str(client.base_url)
            self._client = client
            return
        if credential is None:
            credential = AnthropicCredential(api_key=api_key, base_url=base_url)
        self.credential = credential
        self.base_url = base_url or credential.base_url
        self._client = self._sdk.AsyncAnthropic(
            api_key=credential.get_api_key(),
            base_url=self.base_url,
            timeout=timeout,
            max_retries=max_retries,
        )

    def build_request(
        self,
        messages: list[Msg],
        tools: list[ToolSchema],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The keyword arguments of ``client.messages.create`` for one call."""
        system, turns = format_anthropic_messages(messages)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": turns,
            "max_tokens": DEFAULT_MAX_TOKENS,
            **self.generate_kwargs,
            **kwargs,
        }
        if system:
            request["system"] = system
        if tools:
            request["tools"] = format_anthropic_tools(tools)
            choice = format_anthropic_tool_choice(tool_choice)
            if choice is not None:
                request["tool_choice"] = choice
        return request

    def _error(self, exc: Exception) -> ModelCallError:
        anthropic = self._sdk
        return model_call_error(
            self.provider,
            self.model,
            self.base_url,
            exc,
            timeout_errors=(anthropic.APITimeoutError,),
            connection_errors=(anthropic.APIConnectionError,),
        )

    async def _call(
        self,
        messages: list[Msg],
        tools: list[ToolSchema],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> ChatResponse:
        request = self.build_request(messages, tools, tool_choice, **kwargs)
        try:
            message = await self._client.messages.create(**request)
            return parse_anthropic_response(message.model_dump())
        except (self._sdk.AnthropicError, ValueError, KeyError, TypeError) as exc:
            raise self._error(exc) from exc

    async def _stream(
        self,
        messages: list[Msg],
        tools: list[ToolSchema],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatChunk]:
        request = self.build_request(messages, tools, tool_choice, **kwargs)
        request["stream"] = True
        acc = AnthropicStreamAccumulator()
        try:
            stream = await self._client.messages.create(**request)
            try:
                async for event in stream:
                    for delta in acc.feed(event.model_dump()):
                        yield delta
            finally:
                await stream.close()
            final = acc.finish()
        except (self._sdk.AnthropicError, ValueError, KeyError, TypeError) as exc:
            raise self._error(exc) from exc
        yield ChatChunk(kind="final", final=final)

    async def aclose(self) -> None:
        """Close the HTTP client this model built. Safe to call twice."""
        if self._owns_client:
            await self._client.close()

    def __repr__(self) -> str:
        return (
            f"AnthropicChatModel(model={self.model!r}, base_url={redact_url(self.base_url)!r}, "
            f"stream={self.stream})"
        )
