"""OpenAI chat models, and any OpenAI-compatible server (Ollama, vLLM, llama.cpp, DashScope).

Example::

    from mnemoscope.message import UserMsg
    from mnemoscope.model import OpenAIChatModel

    model = OpenAIChatModel("gpt-4o-mini")                       # key from $OPENAI_API_KEY
    local = OpenAIChatModel("qwen3:8b", base_url="http://localhost:11434/v1", api_key="ollama")
    response = await model([UserMsg("alice", "Hello!")])
    print(response.text)
    await model.aclose()

The adapter owns the ``AsyncOpenAI`` client it builds (closed by :meth:`aclose`); a client
passed with ``client=`` is used as is and left open. SDK errors are re-raised as
:class:`~mnemoscope.errors.ModelCallError` naming the provider, model and HTTP status.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import openai

from mnemoscope._http import model_call_error as describe_call_error
from mnemoscope._http import openai_client
from mnemoscope.credential import CredentialBase, OpenAICredential
from mnemoscope.errors import ModelCallError
from mnemoscope.model._openai_formatter import (
    OpenAIStreamAccumulator,
    format_openai_messages,
    format_openai_tool_choice,
    format_openai_tools,
    parse_openai_response,
)
from mnemoscope.model._sdk import SDKChatModel, WireFormat


@functools.cache
def _sdk_create_params() -> frozenset[str]:
    client = openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9")
    return frozenset(inspect.signature(client.chat.completions.create).parameters)


def split_generate_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keep the SDK's own parameters; move provider-specific ones into ``extra_body``.

    ``enable_thinking`` (Qwen), ``top_k`` (vLLM) and the like are not parameters of the
    ``openai`` SDK, which would reject them; servers read them from the JSON body.
    """
    known = _sdk_create_params()
    out: dict[str, Any] = {}
    extra = dict(kwargs.get("extra_body") or {})
    for key, value in kwargs.items():
        if key == "extra_body":
            continue
        if key in known:
            out[key] = value
        else:
            extra[key] = value
    if extra:
        out["extra_body"] = extra
    return out


def model_call_error(
    provider: str, model: str, base_url: str | None, exc: Exception
) -> ModelCallError:
    """A :class:`ModelCallError` describing an exception of the ``openai`` SDK."""
    return describe_call_error(
        provider,
        model,
        base_url,
        exc,
        timeout_errors=(openai.APITimeoutError,),
        connection_errors=(openai.APIConnectionError,),
    )


class OpenAIChatModel(SDKChatModel):
    """A chat model served over the OpenAI chat-completions API.

    Args:
        model: the model name, e.g. ``"gpt-4o-mini"`` or ``"llama3.1:8b"``.
        credential: key and endpoint; by default built from ``api_key``/``base_url`` or
            ``$OPENAI_API_KEY``/``$OPENAI_BASE_URL``.
        api_key: shortcut for ``OpenAICredential(api_key=...)`` (not with ``credential``).
        base_url: the server, e.g. ``http://localhost:11434/v1`` (Ollama),
            ``http://localhost:8000/v1`` (vLLM), ``http://localhost:8080/v1`` (llama.cpp);
            overrides the credential's.
        stream: stream responses over the wire (SSE).
        generate_kwargs: sent with every call (``temperature``, ``max_tokens``, ...); keys
            the SDK does not know go into the JSON body as they are.
        timeout: seconds per HTTP request.
        max_retries: SDK retries on connection errors, 408/409/429 and 5xx.
        client: an ``openai.AsyncOpenAI`` to use instead of building one (not closed by
            :meth:`aclose`).
        token_counter: counts tokens of a text; defaults to ``count_tokens``.
    """

    provider = "openai"
    credential_class: ClassVar[type[CredentialBase]] = OpenAICredential
    wire = WireFormat(
        messages=lambda messages: {"messages": format_openai_messages(messages)},
        tools=format_openai_tools,
        tool_choice=format_openai_tool_choice,
        parse=parse_openai_response,
        accumulator=OpenAIStreamAccumulator,
    )
    _sdk = openai
    _sdk_error = "OpenAIError"
    supports_json_mode = True  # response_format={"type": "json_object"}; some servers refuse it

    def _client_builder(self, timeout: float, max_retries: int) -> Callable[[Any, str | None], Any]:
        return openai_client(timeout, max_retries)

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return split_generate_kwargs({**self.generate_kwargs, **kwargs})

    # ------------------------------------------------------------------ calling
    async def _send(self, request: dict[str, Any]) -> Any:
        return await self._client.chat.completions.create(**request)

    def _stream_request(self, request: dict[str, Any]) -> None:
        super()._stream_request(request)
        request.setdefault("stream_options", {"include_usage": True})
