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

from collections.abc import Callable
from typing import Any

from mnemoscope._optional import require
from mnemoscope.credential import AnthropicCredential
from mnemoscope.message import Msg
from mnemoscope.model._anthropic_formatter import (
    AnthropicStreamAccumulator,
    format_anthropic_messages,
    format_anthropic_tool_choice,
    format_anthropic_tools,
    parse_anthropic_response,
)
from mnemoscope.model._sdk import SDKChatModel, WireFormat

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` sent when ``generate_kwargs`` does not set it (the API requires one)."""


def _request_messages(messages: list[Msg]) -> dict[str, Any]:
    system, turns = format_anthropic_messages(messages)
    return {"messages": turns, "system": system} if system else {"messages": turns}


class AnthropicChatModel(SDKChatModel):
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
    credential_class = AnthropicCredential
    wire = WireFormat(
        messages=_request_messages,
        tools=format_anthropic_tools,
        tool_choice=format_anthropic_tool_choice,
        parse=parse_anthropic_response,
        accumulator=AnthropicStreamAccumulator,
    )
    _sdk_error = "AnthropicError"

    def _import_sdk(self) -> Any:
        return require("anthropic", extra="anthropic", feature="AnthropicChatModel")

    def _client_builder(self, timeout: float, max_retries: int) -> Callable[[Any, str | None], Any]:
        sdk = self._sdk
        return lambda credential, url: sdk.AsyncAnthropic(
            api_key=credential.get_api_key(), base_url=url, timeout=timeout, max_retries=max_retries
        )

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"max_tokens": DEFAULT_MAX_TOKENS, **self.generate_kwargs, **kwargs}

    async def _send(self, request: dict[str, Any]) -> Any:
        return await self._client.messages.create(**request)
