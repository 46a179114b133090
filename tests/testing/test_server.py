"""OpenAICompatServer over raw HTTP (httpx), independent of any SDK."""

from __future__ import annotations

import base64
import json
import socket
import struct

import httpx
import pytest

from mnemoscope.testing import (
    HTTPErrorReply,
    OpenAICompatServer,
    ServerReply,
    ServerToolCall,
    hash_embedding,
)


def sse_events(body: str) -> list[str]:
    return [line[len("data: ") :] for line in body.splitlines() if line.startswith("data: ")]


def chat(client: httpx.Client, server: OpenAICompatServer, **body: object) -> httpx.Response:
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}
    return client.post(f"{server.base_url}/chat/completions", json=payload)


def test_script_order_and_recording() -> None:
    with (
        OpenAICompatServer(["first", ServerToolCall("f", {"a": 1})]) as server,
        httpx.Client() as client,
    ):
        r1 = chat(client, server, temperature=0.5)
        r2 = chat(client, server, headers=None)
        assert r1.status_code == 200
        assert r1.json()["choices"][0]["message"]["content"] == "first"
        call = r2.json()["choices"][0]["message"]["tool_calls"][0]
        assert call["function"] == {"name": "f", "arguments": '{"a": 1}'}
        assert r2.json()["choices"][0]["finish_reason"] == "tool_calls"
        assert [r["temperature"] for r in server.requests[:1]] == [0.5]
        assert server.requests[0]["messages"][0]["content"] == "hi"
        assert server.pending == 0
        # exhausted script: a loud 500 that says so
        r3 = chat(client, server)
        assert r3.status_code == 500
        assert "script is exhausted" in r3.json()["error"]["message"]


def test_callable_reply_sees_the_request() -> None:
    def echo(request: dict) -> str:
        return "echo: " + request["messages"][-1]["content"]

    with OpenAICompatServer([echo], default_reply="fallback") as server, httpx.Client() as client:
        assert chat(client, server).json()["choices"][0]["message"]["content"] == "echo: hi"
        assert chat(client, server).json()["choices"][0]["message"]["content"] == "fallback"


def test_auth_is_checked_and_recorded() -> None:
    with OpenAICompatServer(["ok"], api_key="sk-1") as server, httpx.Client() as client:
        denied = client.post(
            f"{server.base_url}/chat/completions",
            json={"messages": []},
            headers={"Authorization": "Bearer nope"},
        )
        assert denied.status_code == 401
        ok = client.post(
            f"{server.base_url}/chat/completions",
            json={"messages": []},
            headers={"Authorization": "Bearer sk-1"},
        )
        assert ok.status_code == 200
        assert [r.authorization for r in server.requests] == ["Bearer nope", "Bearer sk-1"]
        assert server.pending == 0  # the denied request consumed nothing


def test_scripted_errors() -> None:
    with (
        OpenAICompatServer(
            [HTTPErrorReply(429, "slow down", {"retry-after": "3"}), "after"]
        ) as server,
        httpx.Client() as client,
    ):
        r = chat(client, server)
        assert r.status_code == 429
        assert r.headers["retry-after"] == "3"
        assert r.json()["error"]["message"] == "slow down"
        server.fail_next(503, "maintenance", times=2)
        assert chat(client, server).status_code == 503
        emb = client.post(f"{server.base_url}/embeddings", json={"input": "x"})
        assert emb.status_code == 503  # fail_next applies to any endpoint
        assert chat(client, server).json()["choices"][0]["message"]["content"] == "after"


def test_sse_stream_format() -> None:
    reply = ServerReply(
        text="hello big world", tool_calls=[ServerToolCall("f", {"k": "v"}, id="call_x")]
    )
    with OpenAICompatServer([reply, reply]) as server, httpx.Client() as client:
        r = chat(client, server, stream=True, stream_options={"include_usage": True})
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.text)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
        )
        assert text == "hello big world"
        fragments = [
            tc
            for c in chunks
            if c["choices"]
            for tc in c["choices"][0]["delta"].get("tool_calls") or []
        ]
        assert fragments[0]["id"] == "call_x" and fragments[0]["function"]["name"] == "f"
        args = "".join(f["function"].get("arguments") or "" for f in fragments)
        assert json.loads(args) == {"k": "v"} and len(fragments) >= 3
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
        # without include_usage there is no usage chunk
        events = sse_events(chat(client, server, stream=True).text)
        assert all(json.loads(e).get("usage") is None for e in events[:-1])


def test_embeddings_float_and_base64() -> None:
    with OpenAICompatServer(embedding_dimensions=8) as server, httpx.Client() as client:
        r = client.post(f"{server.base_url}/embeddings", json={"input": ["a b", "c"], "model": "e"})
        data = r.json()["data"]
        assert [d["index"] for d in data] == [0, 1]
        assert data[0]["embedding"] == hash_embedding("a b", 8)
        r = client.post(
            f"{server.base_url}/embeddings",
            json={"input": "a b", "dimensions": 4, "encoding_format": "base64"},
        )
        raw = base64.b64decode(r.json()["data"][0]["embedding"])
        decoded = struct.unpack("<4f", raw)
        assert decoded == pytest.approx(hash_embedding("a b", 4), rel=1e-6)
        bad = client.post(f"{server.base_url}/embeddings", json={"input": [[1, 2]]})
        assert bad.status_code == 400


def test_bad_requests() -> None:
    with OpenAICompatServer() as server, httpx.Client() as client:
        r = client.post(f"{server.base_url}/chat/completions", content=b"{nope")
        assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
        assert client.post(f"{server.base_url}/nowhere", json={}).status_code == 404
        assert client.get(f"{server.base_url}/models").json()["data"][0]["id"] == "scripted"


def test_broken_callable_is_reported() -> None:
    def broken(request: dict) -> str:
        raise RuntimeError("bug in test script")

    with OpenAICompatServer([broken]) as server, httpx.Client() as client:
        r = chat(client, server)
        assert r.status_code == 500 and "bug in test script" in r.json()["error"]["message"]


async def test_async_context_manager_stops_the_server() -> None:
    async with OpenAICompatServer(["hi"]) as server:
        port = server.port
        assert server.base_url == f"http://127.0.0.1:{port}/v1"
        async with httpx.AsyncClient() as client:
            r = await client.post(f"{server.base_url}/chat/completions", json={"messages": []})
            assert r.json()["choices"][0]["message"]["content"] == "hi"
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url
    server.stop()  # twice is fine
