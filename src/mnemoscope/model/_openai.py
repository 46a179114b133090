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
from collections.abc import AsyncIterator
from typing import Any

import openai

from mnemoscope._http import DEFAULT_TIMEOUT
from mnemoscope._http import model_call_error as describe_call_error
from mnemoscope._redact import redact_url
from mnemoscope.credential import CredentialBase, OpenAICredential
from mnemoscope.errors import ModelCallError, UserError
from mnemoscope.message import Msg
from mnemoscope.model._base import ChatModelBase, ToolSchema
from mnemoscope.model._openai_formatter import (
    OpenAIStreamAccumulator,
    format_openai_messages,
    format_openai_tool_choice,
    format_openai_tools,
    parse_openai_response,
)
from mnemoscope.model._response import ChatChunk, ChatResponse, ToolChoice
from mnemoscope.model._tokens import TokenCounter


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


class OpenAIChatModel(ChatModelBase):
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
    credential_class: type[CredentialBase] = OpenAICredential
    supports_json_mode = True  # response_format={"type": "json_object"}; some servers refuse it

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
        client: openai.AsyncOpenAI | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        super().__init__(model, stream=stream, token_counter=token_counter)
        if not model or not isinstance(model, str):
            raise UserError(f"{type(self).__name__} needs a model name, got model={model!r}")
        if credential is not None and api_key is not None:
            raise UserError(f"{type(self).__name__}: pass either credential= or api_key=, not both")
        if credential is not None and not isinstance(credential, self.credential_class):
            raise UserError(
                f"{type(self).__name__} expects credential={self.credential_class.__name__}"
                f"(...), got {type(credential).__name__}"
            )
        self.generate_kwargs = dict(generate_kwargs or {})
        self._owns_client = client is None
        if client is not None:
            self.credential = credential
            self.base_url: str | None = str(client.base_url)
            self._client = client
            return
        if credential is None:
            credential = self.credential_class(api_key=api_key, base_url=base_url)
        self.credential = credential
        self.base_url = base_url or credential.base_url
        self._client = openai.AsyncOpenAI(
            api_key=credential.get_api_key(),
            base_url=self.base_url,
            organization=getattr(credential, "organization", None),
            timeout=timeout,
            max_retries=max_retries,
        )

    # ------------------------------------------------------------------ request
    def build_request(
        self,
        messages: list[Msg],
        tools: list[ToolSchema],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The keyword arguments of ``client.chat.completions.create`` for one call."""
        request: dict[str, Any] = {
            "model": self.model,
            "messages": format_openai_messages(messages),
            **split_generate_kwargs({**self.generate_kwargs, **kwargs}),
        }
        if tools:
            request["tools"] = format_openai_tools(tools)
            choice = format_openai_tool_choice(tool_choice)
            if choice is not None:
                request["tool_choice"] = choice
        return request

    def _error(self, exc: Exception) -> ModelCallError:
        return model_call_error(self.provider, self.model, self.base_url, exc)

    # ------------------------------------------------------------------ calling
    async def _call(
        self,
        messages: list[Msg],
        tools: list[ToolSchema],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> ChatResponse:
        request = self.build_request(messages, tools, tool_choice, **kwargs)
        try:
            completion = await self._client.chat.completions.create(**request)
            return parse_openai_response(completion.model_dump())
        except (openai.OpenAIError, ValueError, KeyError, TypeError) as exc:
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
        request.setdefault("stream_options", {"include_usage": True})
        acc = OpenAIStreamAccumulator()
        try:
            stream = await self._client.chat.completions.create(**request)
            try:
                async for chunk in stream:
                    for delta in acc.feed(chunk.model_dump()):
                        yield delta
            finally:
                await stream.close()
            final = acc.finish()
        except (openai.OpenAIError, ValueError, KeyError, TypeError) as exc:
            raise self._error(exc) from exc
        yield ChatChunk(kind="final", final=final)

    async def aclose(self) -> None:
        """Close the HTTP client this model built. Safe to call twice."""
        if self._owns_client:
            await self._client.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={redact_url(self.base_url)!r}, "
            f"stream={self.stream})"
        )
