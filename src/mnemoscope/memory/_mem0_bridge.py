"""Our async models behind mem0's synchronous LLM and embedder interfaces.

mem0 calls ``llm.generate_response(...)`` and ``embedder.embed(...)`` synchronously, from
worker threads (``asyncio.to_thread``). Our models are coroutines. The adapters here run
those coroutines on one *bridge event loop*: a dedicated daemon thread shared by every
mem0 store of the process and reference-counted, so it starts with the first store and
stops (its tasks cancelled, async generators and executor shut down, loop closed) when the
last store is closed. A model used by mem0 therefore always runs on the same loop, however
many times the application calls ``asyncio.run``, from whichever thread: its HTTP
connection pool is never touched from two loops. That is also why the agent must not use
the very same model *instance* (the middleware checks this at ``setup``).

The adapters are registered with mem0's ``LlmFactory``/``EmbedderFactory`` under the
provider name ``"mnemoscope"``; :func:`bridged_memory_config` returns a copy of a
``MemoryConfig`` whose ``llm``/``embedder`` slots point at them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

from mnemoscope._optional import require
from mnemoscope.embedding import EmbeddingModelBase
from mnemoscope.errors import MemoryExtractionError, ModelCallError
from mnemoscope.message import AssistantMsg, Msg, SystemMsg, UserMsg
from mnemoscope.model import ChatModelBase, ChatResponse, ToolSchema

logger = logging.getLogger("mnemoscope.memory.mem0")

_T = TypeVar("_T")

PROVIDER = "mnemoscope"
"""The provider name our adapters are registered under in mem0's factories."""

DEFAULT_BRIDGE_TIMEOUT = 300.0
"""Seconds one bridged model call may take before mem0's worker thread gives up."""


class BridgeLoop:
    """A reference-counted event loop running in its own daemon thread."""

    def __init__(self, name: str = "mnemoscope-mem0-bridge") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._refs = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.generation = 0
        """How many times the loop was started (a new loop each time)."""
        self._models: dict[int, list[Any]] = {}

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def acquire(self) -> None:
        """Take a reference; starts the loop thread on the first one."""
        with self._lock:
            if self._refs == 0:
                self._start()
            self._refs += 1

    def release(self) -> None:
        """Drop a reference; the last one stops the thread and closes the loop."""
        with self._lock:
            if self._refs == 0:
                return
            self._refs -= 1
            if self._refs == 0:
                self._stop()

    def attach(self, *models: Any) -> None:
        """Count stores using each model (models hold connections bound to this loop)."""
        with self._lock:
            for model in models:
                entry = self._models.setdefault(id(model), [model, 0])
                entry[1] += 1

    def detach(self, *models: Any) -> None:
        """Uncount models; one no store uses any more is closed *on the bridge loop*,
        where its connections live (closing it later from another loop would fail with
        "Event loop is closed")."""
        to_close = []
        with self._lock:
            for model in models:
                entry = self._models.get(id(model))
                if entry is None:
                    continue
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._models[id(model)]
                    to_close.append(model)
        for model in to_close:
            try:
                self.run(model.aclose(), timeout=30)
            except Exception as exc:  # closing is best effort
                logger.debug("closing %r on the bridge loop failed: %s", model, exc)

    def _start(self) -> None:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            finally:
                try:
                    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                    for task in pending:
                        task.cancel()
                    if pending:
                        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                    loop.run_until_complete(loop.shutdown_asyncgens())
                    loop.run_until_complete(loop.shutdown_default_executor())
                finally:
                    asyncio.set_event_loop(None)
                    loop.close()

        thread = threading.Thread(target=main, name=self._name, daemon=True)
        thread.start()
        ready.wait()
        self._loop, self._thread = loop, thread
        self.generation += 1

    def _stop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join(timeout=30)

    def run(
        self, coro: Coroutine[Any, Any, _T], timeout: float | None = DEFAULT_BRIDGE_TIMEOUT
    ) -> _T:
        """Run ``coro`` on the bridge loop and block the calling thread until it is done."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            coro.close()
            raise RuntimeError(
                "the mem0 bridge event loop is not running: the mem0 store was closed "
                "(call aclose() only when you are done with the middleware)"
            )
        if threading.current_thread() is thread:
            coro.close()
            raise RuntimeError("a bridged model call was made from the bridge loop itself")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(
                f"the bridged model call did not finish within {timeout} s"
            ) from None


BRIDGE = BridgeLoop()
"""The process-wide bridge used by every model-backed mem0 store."""

# Objects handed to adapters while mem0 constructs them (keyed by a one-off token that is
# passed through mem0's config as the "model" name).
_PENDING: dict[str, Any] = {}


def _claim(token: str) -> Any:
    try:
        return _PENDING.pop(token)
    except KeyError:
        raise RuntimeError(
            f"mem0 asked for the '{PROVIDER}' provider with an unknown token {token!r}; build "
            "the store through Mem0LongTermMemory / Mem0Middleware, not mem0's own config"
        ) from None


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI-style parts
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return "" if content is None else str(content)


def to_msgs(messages: list[dict[str, Any]]) -> list[Msg]:
    """mem0's OpenAI-style message dicts as our messages."""
    out: list[Msg] = []
    for m in messages:
        role, text = m.get("role", "user"), _text_of(m.get("content"))
        if role == "system":
            out.append(SystemMsg(text))
        elif role == "assistant":
            out.append(AssistantMsg(m.get("name") or "assistant", text))
        else:
            out.append(UserMsg(m.get("name") or "user", text))
    return out


def _tool_schemas(tools: list[dict[str, Any]] | None) -> list[ToolSchema]:
    schemas: list[ToolSchema] = []
    for t in tools or []:
        fn = t.get("function", t)
        schemas.append(
            {
                "name": fn["name"],
                "description": fn.get("description", ""),
                "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
            }
        )
    return schemas


def _load_mem0_bases() -> tuple[type, type, type]:
    os.environ.setdefault("MEM0_TELEMETRY", "False")  # see mnemoscope.memory._mem0
    require("mem0", extra="mem0", feature="Mem0LongTermMemory")
    from mem0.configs.llms.base import BaseLlmConfig
    from mem0.embeddings.base import EmbeddingBase
    from mem0.llms.base import LLMBase

    return BaseLlmConfig, LLMBase, EmbeddingBase


def _load_mem0_parsing() -> tuple[str, Any, Any]:
    """mem0's extraction prompt and the helpers it parses the reply with."""
    from mem0.memory.utils import extract_json, remove_code_blocks

    try:
        from mem0.configs import prompts

        prompt = str(prompts.ADDITIVE_EXTRACTION_PROMPT)
    except (ImportError, AttributeError):  # another mem0: JSON replies are only parsed
        prompt = ""
    return prompt.strip(), remove_code_blocks, extract_json


_BaseLlmConfig, _LLMBase, _EmbeddingBase = _load_mem0_bases()
_EXTRACTION_PROMPT, _remove_code_blocks, _extract_json = _load_mem0_parsing()


class BridgedLlmConfig(_BaseLlmConfig):  # type: ignore[misc,valid-type]
    """mem0 LLM config carrying our chat model (resolved from a construction token)."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        super().__init__(model=model)
        self.chat_model, self.bridge, self.timeout = _claim(model)


class BridgedLLM(_LLMBase):  # type: ignore[misc,valid-type]
    """mem0's synchronous LLM interface over a :class:`ChatModelBase`.

    When mem0 asks for JSON (``response_format={"type": "json_object"}``, its fact
    extraction), the format is forwarded to models that support JSON mode
    (``supports_json_mode``: OpenAI-compatible servers, DashScope); other models get the
    prompt alone, which already asks for JSON. A server that refuses the parameter
    (HTTP 400/422) is asked again without it, once, and this adapter remembers not to send
    it again. A JSON reply that cannot be parsed raises
    :class:`~mnemoscope.errors.MemoryExtractionError` instead of reaching mem0, which
    would read it as "nothing to store".
    """

    config: BridgedLlmConfig

    def __init__(self, config: BridgedLlmConfig) -> None:
        super().__init__(config)
        self.chat_model: ChatModelBase = config.chat_model
        self.bridge: BridgeLoop = config.bridge
        self.timeout: float | None = config.timeout
        self.calls = 0
        self.json_mode: bool = bool(getattr(self.chat_model, "supports_json_mode", False))
        """Whether ``response_format`` is forwarded (cleared when the server refuses it)."""

    def generate_response(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str = "auto",
        response_format: Any = None,
        **kwargs: Any,
    ) -> Any:
        self.calls += 1
        schemas = _tool_schemas(tools)
        wants_json = not schemas and _is_json_format(response_format)
        extra: dict[str, Any] = {}
        if wants_json and self.json_mode:
            extra["response_format"] = dict(response_format)
        msgs = to_msgs(messages)
        try:
            response = self._call(msgs, schemas, tool_choice, extra)
        except ModelCallError as exc:
            if not extra or exc.status_code not in JSON_MODE_REFUSED_STATUSES:
                raise
            response = self._call(msgs, schemas, tool_choice, {})
            self.json_mode = False  # the retry worked: the format was what the server refused
            logger.info(
                "%r refused response_format (HTTP %s); mem0 asks for JSON in the prompt only "
                "from now on",
                self.chat_model,
                exc.status_code,
            )
        if not schemas:
            if wants_json:
                check_json_reply(
                    response.text, self.chat_model, extraction=_is_extraction(messages)
                )
            return response.text
        return {
            "content": response.text,
            "tool_calls": [{"name": b.name, "arguments": b.input} for b in response.tool_uses],
        }

    def _call(
        self, msgs: list[Msg], schemas: list[ToolSchema], tool_choice: str, extra: dict[str, Any]
    ) -> ChatResponse:
        return self.bridge.run(
            self.chat_model(
                msgs,
                tools=schemas or None,
                tool_choice=tool_choice if schemas else None,
                **extra,
            ),
            self.timeout,
        )


JSON_MODE_REFUSED_STATUSES = frozenset({400, 422})
"""HTTP statuses after which a JSON-mode request is retried without ``response_format``."""


def _is_json_format(response_format: Any) -> bool:
    return isinstance(response_format, dict) and response_format.get("type") in (
        "json_object",
        "json_schema",
    )


def _is_extraction(messages: list[dict[str, Any]]) -> bool:
    """Whether ``messages`` are mem0's fact extraction (its system prompt)."""
    system = next((m for m in messages if m.get("role") == "system"), None)
    text = _text_of(system.get("content")) if system else ""
    return bool(_EXTRACTION_PROMPT) and text.strip().startswith(_EXTRACTION_PROMPT)


def check_json_reply(text: str, model: object, *, extraction: bool) -> None:
    """Raise :class:`MemoryExtractionError` unless mem0 can parse ``text`` (its own way).

    mem0 reads an unparseable extraction reply as "no facts" and stores nothing without a
    word; an extraction must be a JSON object with a ``"memory"`` list (``{"memory": []}``
    is a valid "nothing new").
    """
    cleaned = _remove_code_blocks(text)
    shown = text.strip()
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    what = "the extraction reply" if extraction else "the JSON reply"
    if not cleaned.strip():
        raise MemoryExtractionError(
            f"{what} of {model!r} was empty, so nothing was stored (mem0 expected a JSON "
            'object such as {"memory": [...]}; check the model and its max_tokens)'
        )
    try:
        try:
            value = json.loads(cleaned, strict=False)
        except json.JSONDecodeError:
            value = json.loads(_extract_json(cleaned), strict=False)
    except json.JSONDecodeError as exc:
        raise MemoryExtractionError(
            f"{what} of {model!r} could not be parsed as JSON ({exc}), so nothing was "
            f"stored; the model answered: {shown!r}"
        ) from None
    if extraction and not (isinstance(value, dict) and isinstance(value.get("memory"), list)):
        raise MemoryExtractionError(
            f'{what} of {model!r} is JSON but not an object with a "memory" list, so '
            f"nothing was stored; the model answered: {shown!r}"
        )


class BridgedEmbedder(_EmbeddingBase):  # type: ignore[misc,valid-type]
    """mem0's synchronous embedder interface over an :class:`EmbeddingModelBase`."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.embedding_model: EmbeddingModelBase
        self.embedding_model, self.bridge, self.timeout = _claim(config.model)
        self.config.embedding_dims = self.embedding_model.dimensions

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return self.bridge.run(self.embedding_model.embed_one(text), self.timeout)

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        return self.bridge.run(self.embedding_model.embed(list(texts)), self.timeout)


def _register() -> None:
    from mem0.utils.factory import EmbedderFactory, LlmFactory

    LlmFactory.register_provider(PROVIDER, f"{__name__}.BridgedLLM", BridgedLlmConfig)
    EmbedderFactory.provider_to_class[PROVIDER] = f"{__name__}.BridgedEmbedder"


_register()


def bridged_memory_config(
    config: Any,
    *,
    chat_model: ChatModelBase | None,
    embedding_model: EmbeddingModelBase | None,
    bridge: BridgeLoop,
    timeout: float | None,
) -> tuple[Any, list[str]]:
    """A copy of ``config`` whose llm/embedder slots (those given) use our models.

    Returns the config and the tokens it carries (pass them to :func:`discard_tokens`
    after ``AsyncMemory(config)`` so a failed construction leaves nothing behind).
    """
    from mem0.embeddings.configs import EmbedderConfig
    from mem0.llms.configs import LlmConfig

    update: dict[str, Any] = {}
    tokens: list[str] = []
    if chat_model is not None:
        token = f"{PROVIDER}-llm-{uuid.uuid4().hex}"
        _PENDING[token] = (chat_model, bridge, timeout)
        tokens.append(token)
        # model_construct: mem0's validator only knows its built-in provider names
        update["llm"] = LlmConfig.model_construct(provider=PROVIDER, config={"model": token})
    if embedding_model is not None:
        token = f"{PROVIDER}-embedder-{uuid.uuid4().hex}"
        _PENDING[token] = (embedding_model, bridge, timeout)
        tokens.append(token)
        update["embedder"] = EmbedderConfig.model_construct(
            provider=PROVIDER,
            config={"model": token, "embedding_dims": embedding_model.dimensions},
        )
    return config.model_copy(update=update), tokens


def discard_tokens(tokens: list[str]) -> None:
    for token in tokens:
        _PENDING.pop(token, None)
