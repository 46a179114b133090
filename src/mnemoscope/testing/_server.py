"""A real local HTTP server speaking the OpenAI chat-completions and embeddings APIs.

Example::

    from mnemoscope.message import UserMsg
    from mnemoscope.model import OpenAIChatModel
    from mnemoscope.testing import OpenAICompatServer, ServerToolCall

    async with OpenAICompatServer(
        ["Hello!", [ServerToolCall("get_weather", {"city": "Paris"})]]
    ) as server:
        model = OpenAIChatModel("test-model", api_key="sk-test", base_url=server.base_url)
        print((await model([UserMsg("alice", "hi")])).text)       # Hello!
        print(server.requests[0]["messages"])                       # what the model was sent
        await model.aclose()

The server binds ``127.0.0.1`` on a free port and answers from a *script*: each
``POST /v1/chat/completions`` takes the next item, which may be

* a ``str`` (a text reply),
* a :class:`ServerToolCall` or a list of them (a tool-call reply),
* a :class:`ServerReply` (text, tool calls, reasoning, usage, finish reason together),
* an :class:`HTTPErrorReply` (answer with that HTTP status), or
* a callable taking the request JSON and returning any of the above.

Streaming requests (``"stream": true``) get SSE ``data:`` chunks: the text word by word,
tool calls as argument fragments, a finish chunk, a usage chunk when
``stream_options.include_usage`` is set, then ``data: [DONE]``. ``POST /v1/embeddings``
answers with the deterministic :func:`~mnemoscope.testing.hash_embedding` vectors in the
requested ``dimensions``. ``POST /v1/messages`` speaks a minimal Anthropic Messages API
(JSON and SSE) from the same script, for :class:`~mnemoscope.model.AnthropicChatModel`
tests; point that model at :attr:`OpenAICompatServer.root_url`.

Every request is recorded in :attr:`OpenAICompatServer.requests` (the JSON body, with
``path``, ``headers`` and ``authorization``). Nothing here mocks a client: the SDKs talk
real HTTP to it.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mnemoscope.model import estimate_tokens
from mnemoscope.testing._anthropic_wire import anthropic_events, anthropic_message
from mnemoscope.testing._hash_embedding import hash_embedding


@dataclass
class ServerToolCall:
    """A tool call the server replies with. ``arguments`` may be a raw (even invalid) string."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass
class ServerReply:
    """A full scripted reply.

    Attributes:
        text: the assistant text.
        tool_calls: tool calls to make.
        reasoning: sent as ``reasoning_content`` (OpenAI-compatible) or a thinking block
            (Anthropic).
        usage: ``(input_tokens, output_tokens)``; estimated from the request when ``None``.
        finish_reason: defaults to ``"tool_calls"`` with tool calls, else ``"stop"``.
    """

    text: str = ""
    tool_calls: list[ServerToolCall] = field(default_factory=list)
    reasoning: str = ""
    usage: tuple[int, int] | None = None
    finish_reason: str | None = None


@dataclass(frozen=True)
class WireAnswer:
    """One scripted reply as the server sends it, in either wire format.

    Attributes:
        n: the reply's number, for its ids (``chatcmpl-<n>``, ``msg_<n>``).
        model: the model name the reply names.
        reply: what the script said.
        calls: the tool calls with their ids.
        usage: ``(input_tokens, output_tokens)``.
    """

    n: int
    model: str
    reply: ServerReply
    calls: list[tuple[str, ServerToolCall]]
    usage: tuple[int, int]


@dataclass
class HTTPErrorReply:
    """Answer with an HTTP error (e.g. 500, 429) and an OpenAI-style error body."""

    status: int = 500
    message: str = "scripted server error"
    headers: dict[str, str] = field(default_factory=dict)


ScriptItem = (
    str
    | ServerToolCall
    | list[ServerToolCall]
    | ServerReply
    | HTTPErrorReply
    | Callable[[dict[str, Any]], Any]
)


class RecordedRequest(dict[str, Any]):
    """A request body the server received (a ``dict``), plus where it went and its headers."""

    def __init__(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        super().__init__(body)
        self.path = path
        self.headers = headers
        self.authorization = headers.get("authorization") or headers.get("x-api-key")


def _resolve(item: Any, body: dict[str, Any]) -> ServerReply | HTTPErrorReply:
    if callable(item) and not isinstance(item, ServerToolCall | ServerReply | HTTPErrorReply):
        item = item(body)
    if isinstance(item, ServerReply | HTTPErrorReply):
        return item
    if isinstance(item, str):
        return ServerReply(text=item)
    if isinstance(item, ServerToolCall):
        return ServerReply(tool_calls=[item])
    if isinstance(item, list) and all(isinstance(c, ServerToolCall) for c in item):
        return ServerReply(tool_calls=list(item))
    raise TypeError(f"not a script item: {item!r}")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: OpenAICompatServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests read server.requests instead

    def setup(self) -> None:
        super().setup()
        self.server.owner._connections.add(self.connection)

    def finish(self) -> None:
        self.server.owner._connections.discard(self.connection)
        super().finish()

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self.send_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        else:
            self.send_json(404, _error_body(f"no route GET {self.path}", "not_found"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self.send_json(400, _error_body(f"request body is not JSON: {exc}", "invalid_json"))
            return
        self.server.owner._dispatch(self, self.path, body)

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, events: Iterable[tuple[str | None, str]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for event, data in events:
            prefix = f"event: {event}\n" if event else ""
            self.wfile.write(f"{prefix}data: {data}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True


def _error_body(message: str, kind: str = "server_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


class OpenAICompatServer:
    """A local OpenAI-compatible HTTP server driven by a script (see module docstring).

    Args:
        script: replies, consumed in order by chat requests.
        api_key: when set, requests without ``Bearer <api_key>`` (or ``x-api-key``) get 401.
        default_reply: answers chat requests once the script is exhausted; without it an
            exhausted script answers HTTP 500 saying so.
        embedding_dimensions: vector size when an embeddings request gives no
            ``dimensions``.
        model_name: the ``model`` reported in responses (defaults to the request's).
    """

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        api_key: str | None = None,
        default_reply: ScriptItem | None = None,
        embedding_dimensions: int = 64,
        model_name: str | None = None,
    ) -> None:
        self._script: deque[ScriptItem] = deque(script)
        self._failures: deque[HTTPErrorReply] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.api_key = api_key
        self.default_reply = default_reply
        self.embedding_dimensions = embedding_dimensions
        self.model_name = model_name
        self.requests: list[RecordedRequest] = []

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> OpenAICompatServer:
        """Bind 127.0.0.1 on a free port and serve in a background thread."""
        if self._httpd is not None:
            return self
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="OpenAICompatServer",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and drop open connections. Safe to call twice."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        for conn in list(self._connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OpenAICompatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> OpenAICompatServer:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("OpenAICompatServer is not running: use start() or `with`")
        return int(self._httpd.server_address[1])

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>`` (the Anthropic SDK's ``base_url``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1`` (the OpenAI SDK's ``base_url``)."""
        return f"{self.root_url}/v1"

    # ------------------------------------------------------------------ scripting
    def queue(self, *items: ScriptItem) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(items)

    def fail_next(
        self,
        status: int = 500,
        message: str = "scripted server error",
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` requests of any endpoint with HTTP ``status``."""
        with self._lock:
            for _ in range(times):
                self._failures.append(HTTPErrorReply(status, message, dict(headers or {})))

    @property
    def pending(self) -> int:
        """Script items not consumed yet."""
        with self._lock:
            return len(self._script)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The recorded chat requests (OpenAI and Anthropic), in order."""
        return [r for r in self.requests if r.path.endswith(("/chat/completions", "/messages"))]

    # ------------------------------------------------------------------ serving
    def _dispatch(self, handler: _Handler, path: str, body: dict[str, Any]) -> None:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        record = RecordedRequest(path, body, headers)
        with self._lock:
            self.requests.append(record)
        anthropic = path.rstrip("/").endswith("/messages")
        if self.api_key is not None and record.authorization not in (
            f"Bearer {self.api_key}",
            self.api_key,
        ):
            handler.send_json(401, _error_body("invalid API key", "authentication_error"))
            return
        with self._lock:
            failure = self._failures.popleft() if self._failures else None
        if failure is not None:
            self._send_error(handler, failure, anthropic)
            return
        route = path.split("?", 1)[0].rstrip("/")
        if route.endswith("/chat/completions") or anthropic:
            self._chat(handler, body, anthropic)
        elif route.endswith("/embeddings"):
            self._embeddings(handler, body)
        else:
            handler.send_json(404, _error_body(f"no route POST {path}", "not_found"))

    def _send_error(self, handler: _Handler, err: HTTPErrorReply, anthropic: bool) -> None:
        if anthropic:
            payload = {"type": "error", "error": {"type": "api_error", "message": err.message}}
        else:
            payload = _error_body(err.message)
        handler.send_json(err.status, payload, err.headers)

    def _next_reply(self, body: dict[str, Any]) -> ServerReply | HTTPErrorReply:
        with self._lock:
            item = self._script.popleft() if self._script else self.default_reply
            answered = len(self.chat_requests) - 1
        if item is None:
            return HTTPErrorReply(
                500,
                f"OpenAICompatServer: the script is exhausted after {answered} chat "
                "replies; queue more with server.queue(...) or set default_reply",
            )
        try:
            return _resolve(item, body)
        except Exception as exc:
            return HTTPErrorReply(500, f"script item failed: {type(exc).__name__}: {exc}")

    def _usage(self, body: dict[str, Any], reply: ServerReply) -> tuple[int, int]:
        if reply.usage is not None:
            return reply.usage
        prompt = estimate_tokens(json.dumps(body.get("messages", []), ensure_ascii=False))
        completion_text = (
            reply.reasoning + reply.text + "".join(c.arguments_json() for c in reply.tool_calls)
        )
        return prompt, max(1, estimate_tokens(completion_text))

    def _chat(self, handler: _Handler, body: dict[str, Any], anthropic: bool) -> None:
        reply = self._next_reply(body)
        if isinstance(reply, HTTPErrorReply):
            self._send_error(handler, reply, anthropic)
            return
        n = next(self._ids)
        calls = [
            (c.id or (f"toolu_{n}_{i}" if anthropic else f"call_{n}_{i}"), c)
            for i, c in enumerate(reply.tool_calls)
        ]
        model = self.model_name or body.get("model") or "scripted"
        answer = WireAnswer(n, model, reply, calls, self._usage(body, reply))
        if anthropic:
            if body.get("stream"):
                handler.send_sse(anthropic_events(answer))
            else:
                handler.send_json(200, anthropic_message(answer))
            return
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            handler.send_sse((None, data) for data in _openai_chunks(answer, finish, include_usage))
            return
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if calls:
            message["tool_calls"] = [
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json()},
                }
                for cid, c in calls
            ]
        handler.send_json(
            200,
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": _openai_usage(answer.usage),
            },
        )

    def _embeddings(self, handler: _Handler, body: dict[str, Any]) -> None:
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs):
            handler.send_json(
                400, _error_body("input must be a string or a list of strings", "invalid_request")
            )
            return
        dims = int(body.get("dimensions") or self.embedding_dimensions)
        data = []
        for i, text in enumerate(inputs):
            vector = hash_embedding(text, dims)
            embedding: Any = vector
            if body.get("encoding_format") == "base64":
                embedding = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        tokens = sum(estimate_tokens(t) for t in inputs)
        handler.send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": self.model_name or body.get("model") or "scripted",
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def __repr__(self) -> str:
        where = self.base_url if self._httpd is not None else "not running"
        return f"OpenAICompatServer({where}, pending={self.pending}, requests={len(self.requests)})"


def _openai_usage(usage: tuple[int, int]) -> dict[str, int]:
    return {
        "prompt_tokens": usage[0],
        "completion_tokens": usage[1],
        "total_tokens": usage[0] + usage[1],
    }


def split_words(text: str) -> list[str]:
    """Split text into streaming pieces (each word with its leading whitespace)."""
    return re.findall(r"\s*\S+\s*$|\s*\S+", text) or ([text] if text else [])


def _halves(text: str) -> list[str]:
    mid = len(text) // 2
    return [p for p in (text[:mid], text[mid:]) if p]


def _openai_chunks(answer: WireAnswer, finish: str, include_usage: bool) -> Iterable[str]:
    n, model, reply, calls, usage = answer.n, answer.model, answer.reply, answer.calls, answer.usage

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        return json.dumps(
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            },
            ensure_ascii=False,
        )

    yield chunk({"role": "assistant", "content": ""})
    for piece in split_words(reply.reasoning):
        yield chunk({"reasoning_content": piece})
    for piece in split_words(reply.text):
        yield chunk({"content": piece})
    for index, (cid, call) in enumerate(calls):
        head = {"index": index, "id": cid, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        for frag in _halves(call.arguments_json()):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": frag}}]})
    yield chunk({}, finish)
    if include_usage:
        yield json.dumps(
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": _openai_usage(usage),
            }
        )
    yield "[DONE]"
