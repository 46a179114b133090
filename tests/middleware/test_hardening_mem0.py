"""Issue 10, item 30: mem0's JSON response format, unparseable extractions, telemetry order.

Real mem0ai, a local Qdrant path in a temp dir, the hash embedder, and chat models that
talk real HTTP to the local ``OpenAICompatServer`` (or scripted ones for prompt-only).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# imported before mem0: it turns mem0's telemetry off (no network in tests)
from mnemoscope.memory._mem0 import Mem0LongTermMemory

pytest.importorskip("mem0", reason="the 'mem0' extra (mem0ai) is not installed")

from mnemoscope.agent import Agent
from mnemoscope.credential import DashScopeCredential
from mnemoscope.errors import MemoryExtractionError, MemoryStoreError
from mnemoscope.middleware import Mem0Middleware, MemoryEvent
from mnemoscope.model import AnthropicChatModel, ChatModelBase, DashScopeChatModel, OpenAIChatModel
from mnemoscope.testing import (
    HashEmbeddingModel,
    HTTPErrorReply,
    OpenAICompatServer,
    ScriptedChatModel,
)

ROOT = Path(__file__).resolve().parents[2]
JSON_MODE = {"type": "json_object"}


def facts(*texts: str) -> str:
    return json.dumps({"memory": [{"text": t} for t in texts]})


def is_extraction(body: dict[str, Any]) -> bool:
    return "Memory Extractor" in json.dumps([body.get("messages"), body.get("system")])


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "qdrant")


@pytest.fixture
def stores() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for item in made:
        store = item.store if isinstance(item, Mem0Middleware) else item
        store.close_sync()


def store_with(stores: list[Any], path: str, chat: ChatModelBase) -> Mem0LongTermMemory:
    store = Mem0LongTermMemory(chat_model=chat, embedding_model=HashEmbeddingModel(64), path=path)
    stores.append(store)
    return store


def openai_model(server: OpenAICompatServer) -> OpenAIChatModel:
    return OpenAIChatModel("m", api_key="sk-test", base_url=server.base_url, max_retries=0)


# ------------------------------------------------------- response_format on the wire
@pytest.mark.parametrize("provider", ["openai", "dashscope"])
async def test_json_mode_models_get_response_format_on_the_wire(
    path: str, stores: list[Any], provider: str
) -> None:
    with OpenAICompatServer([facts("Alice prefers dark-mode charts")]) as server:
        chat: ChatModelBase = (
            openai_model(server)
            if provider == "openai"
            else DashScopeChatModel(
                credential=DashScopeCredential(api_key="sk-test", base_url=server.base_url),
                max_retries=0,
            )
        )
        store = store_with(stores, path, chat)
        result = await store.record("I prefer dark-mode charts.", user_id="alice")
        (request,) = server.chat_requests
    assert is_extraction(request)
    assert request["response_format"] == JSON_MODE
    assert [i.content for i in result.added] == ["Alice prefers dark-mode charts"]


@pytest.mark.parametrize("status", [400, 422])
async def test_a_refused_response_format_is_retried_once_without_it_and_remembered(
    path: str, stores: list[Any], status: int
) -> None:
    def reply(body: dict[str, Any]) -> Any:
        if "response_format" in body:
            return HTTPErrorReply(status, "response_format is not supported by this server")
        return facts("Alice drinks tea")

    with OpenAICompatServer(default_reply=reply) as server:
        store = store_with(stores, path, openai_model(server))
        first = await store.record("I drink tea.", user_id="alice")
        second = await store.record("I drink tea every morning.", user_id="alice")
        sent = ["response_format" in r for r in server.chat_requests]
    assert [i.content for i in first.added] == ["Alice drinks tea"]
    assert not second.added  # the same fact again: mem0 skips the duplicate
    # refused, retried without it, then never sent again
    assert sent == [True, False, False]


async def test_a_400_unrelated_to_the_format_fails_loudly_and_is_not_remembered(
    path: str, stores: list[Any]
) -> None:
    with OpenAICompatServer(
        [HTTPErrorReply(400, "context too long"), HTTPErrorReply(400, "context too long")],
        default_reply=facts("Alice lives in Hangzhou"),
    ) as server:
        store = store_with(stores, path, openai_model(server))
        with pytest.raises(MemoryStoreError, match="400"):
            await store.record("I live in Hangzhou.", user_id="alice")
        result = await store.record("I live in Hangzhou.", user_id="alice")
        sent = ["response_format" in r for r in server.chat_requests]
    # both attempts of the failed write, then JSON mode again: the format was not the cause
    assert sent == [True, False, True]
    assert [i.content for i in result.added] == ["Alice lives in Hangzhou"]


async def test_prompt_only_models_get_no_response_format(path: str, stores: list[Any]) -> None:
    with OpenAICompatServer([facts("Alice likes ramen")]) as server:
        claude = AnthropicChatModel(
            "claude-test", api_key="sk-test", base_url=server.root_url, max_retries=0
        )
        store = store_with(stores, path, claude)
        result = await store.record("I like ramen.", user_id="alice")
        (request,) = server.chat_requests
    assert request.path.endswith("/messages") and is_extraction(request)
    assert "response_format" not in request
    assert [i.content for i in result.added] == ["Alice likes ramen"]

    scripted = ScriptedChatModel([facts("Alice likes udon")])
    store2 = store_with(stores, path + "2", scripted)
    await store2.record("I like udon.", user_id="alice")
    assert "response_format" not in scripted.calls[0].kwargs


# ------------------------------------------- unparseable reply vs nothing new to store
@pytest.mark.parametrize(
    "reply",
    [
        "Sorry, I cannot help with that.",  # not JSON at all
        '{"memory": [{"text": "Alice likes',  # cut off (max_tokens)
        '{"facts": ["Alice likes tea"]}',  # JSON, but not mem0's shape
        '["Alice likes tea"]',
        "",  # nothing at all
    ],
)
async def test_an_unparseable_extraction_reply_raises(
    path: str, stores: list[Any], reply: str
) -> None:
    store = store_with(stores, path, ScriptedChatModel([reply]))
    with pytest.raises(MemoryExtractionError, match="nothing was stored"):
        await store.record("I like tea.", user_id="alice")


@pytest.mark.parametrize(
    "reply",
    [
        '```json\n{"memory": [{"text": "Alice likes tea"}]}\n```',  # fenced
        '<think>the user likes tea</think>{"memory": [{"text": "Alice likes tea"}]}',
        'Here you go: {"memory": [{"text": "Alice likes tea"}]}',  # mem0 finds the object
    ],
)
async def test_replies_mem0_can_parse_are_stored(path: str, stores: list[Any], reply: str) -> None:
    store = store_with(stores, path, ScriptedChatModel([reply]))
    result = await store.record("I like tea.", user_id="alice")
    assert [i.content for i in result.added] == ["Alice likes tea"]


async def test_unparseable_reply_is_an_error_event_and_a_warning_not_nothing_new(
    path: str, stores: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    mem0_chat = ScriptedChatModel(["I could not find any facts, sorry!", '{"memory": []}'])
    mw = Mem0Middleware(
        user_id="alice",
        mode="static_control",
        chat_model=mem0_chat,
        embedding_model=HashEmbeddingModel(64),
        path=path,
    )
    stores.append(mw)
    agent = Agent(
        name="assistant",
        system_prompt="Be helpful.",
        model=ScriptedChatModel(["Hi!", "Hello again!"]),
        middlewares=[mw],
    )
    with caplog.at_level(logging.WARNING, logger="mnemoscope.middleware.long_term"):
        first = [e async for e in agent.reply_stream("hello")]
    (error,) = [e for e in first if isinstance(e, MemoryEvent) and e.action == "error"]
    assert error.data["phase"] == "write"
    assert "could not be parsed" in error.message and "I could not find any facts" in error.message
    assert not [e for e in first if isinstance(e, MemoryEvent) and e.action == "write"]
    assert any("could not be parsed" in r.getMessage() for r in caplog.records)
    assert first[-1].msg.get_text_content() == "Hi!"  # the reply went on

    # a well-formed empty extraction is "nothing new", not an error
    second = [e async for e in agent.reply_stream("how are you?")]
    memory = [e for e in second if isinstance(e, MemoryEvent)]
    assert not [e for e in memory if e.action == "error"]
    (write,) = [e for e in memory if e.action == "write"]
    assert write.message == "the store kept nothing new from this exchange"


# ---------------------------------------------------------------- telemetry order
def _import_lines(code: str) -> list[str]:
    return [
        line
        for line in code.splitlines()
        if re.match(r"(from \S+ import |import )", line) and not line.startswith("from __future__")
    ]


def _mem0_blocks() -> list[str]:
    text = (ROOT / "docs" / "mem0.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", text, re.S | re.M)
    return [b for b in blocks if re.search(r"^(from|import) mem0\b", b, re.M)]


def _telemetry_after(imports: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    script = "\n".join(
        [*imports, "import mem0.memory.telemetry as t", "print('TELEMETRY', t.MEM0_TELEMETRY)"]
    )
    env = {k: v for k, v in os.environ.items() if k != "MEM0_TELEMETRY"}
    env["HOME"] = str(home)  # mem0 with telemetry on writes ~/.mem0: keep it in the temp dir
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=home,
    )


def test_docs_examples_import_mnemoscope_before_mem0(tmp_path: Path) -> None:
    blocks = _mem0_blocks()
    assert blocks, "docs/mem0.md has examples that import mem0"
    for block in blocks:
        imports = _import_lines(block)
        proc = _telemetry_after(imports, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "TELEMETRY False" in proc.stdout, (
            f"this docs/mem0.md example turns mem0's telemetry on (it imports mem0 before "
            f"mnemoscope's mem0 support):\n{block}"
        )


def test_importing_mem0_first_warns_that_telemetry_is_on(tmp_path: Path) -> None:
    wrong = _telemetry_after(
        ["import mem0", "from mnemoscope.middleware import Mem0Middleware"], tmp_path
    )
    assert wrong.returncode == 0, wrong.stderr
    assert "TELEMETRY True" in wrong.stdout and "telemetry is on" in wrong.stderr
    right = _telemetry_after(
        ["from mnemoscope.middleware import Mem0Middleware", "import mem0"], tmp_path
    )
    assert right.returncode == 0, right.stderr
    assert "TELEMETRY False" in right.stdout and "telemetry is on" not in right.stderr
