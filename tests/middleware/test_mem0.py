"""Mem0Middleware end to end: real mem0ai, local Qdrant in a temp dir, offline models."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from pathlib import Path
from typing import Any

import pytest

# imported before mem0: it turns mem0's telemetry off (no network in tests)
from mnemoscope.memory._mem0 import _REAPER, QDRANT_CLIENTS, Mem0LongTermMemory

pytest.importorskip("mem0", reason="the 'mem0' extra (mem0ai) is not installed")

import mem0

from mnemoscope.agent import Agent
from mnemoscope.embedding import OpenAIEmbeddingModel
from mnemoscope.errors import UserError
from mnemoscope.memory._mem0_bridge import BRIDGE
from mnemoscope.message import UserMsg
from mnemoscope.middleware import Mem0Middleware, MemoryEvent
from mnemoscope.model import OpenAIChatModel
from mnemoscope.permission import PermissionRule
from mnemoscope.testing import (
    HashEmbeddingModel,
    HTTPErrorReply,
    OpenAICompatServer,
    ScriptedChatModel,
    tool_call,
)
from mnemoscope.tool import FunctionTool, Toolkit


def facts(*texts: str) -> str:
    return json.dumps({"memory": [{"text": t} for t in texts]})


def is_extraction(messages: Any) -> bool:
    return "Memory Extractor" in json.dumps(messages, default=str)


def new_messages(call: Any) -> str:
    """The "New Messages" section of one mem0 extraction prompt."""
    prompt = call.messages[-1].get_text_content()
    return prompt.rsplit("## New Messages", 1)[1].split("## Observation Date", 1)[0]


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "qdrant")


@pytest.fixture
def middlewares() -> Any:
    made: list[Mem0Middleware] = []
    yield made
    for mw in made:
        mw.store.close_sync()


def mem0_mw(
    middlewares: list[Mem0Middleware], path: str, chat: Any = None, **kw: Any
) -> Mem0Middleware:
    kw.setdefault("embedding_model", HashEmbeddingModel(64))
    mw = Mem0Middleware(
        chat_model=chat if chat is not None else ScriptedChatModel([]), path=path, **kw
    )
    middlewares.append(mw)
    return mw


async def agent_with(
    mw: Mem0Middleware, responses: list[Any], **kw: Any
) -> tuple[Agent, ScriptedChatModel]:
    model = ScriptedChatModel(responses)
    tools = [*await mw.list_tools(), *kw.pop("extra_tools", [])]
    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=tools),
        middlewares=[mw],
        **kw,
    )
    return agent, model


# ----------------------------------------------------------------- the seed
SEED_QUICK_START = """
import asyncio
import os

from mnemoscope.agent import Agent
from mnemoscope.credential import DashScopeCredential
from mnemoscope.embedding import DashScopeEmbeddingModel
from mnemoscope.message import UserMsg
from mnemoscope.middleware import Mem0Middleware
from mnemoscope.model import DashScopeChatModel
from mnemoscope.tool import Toolkit


async def main():
    api_key = os.environ["DASHSCOPE_API_KEY"]

    # Construct these as two separate chat-model objects, even though they
    # use the same provider, model name, endpoint, and API key.
    agent_chat_model = DashScopeChatModel(
        credential=DashScopeCredential(api_key=api_key),
        model="qwen3.7-max",
        stream=False,
    )
    mem0_chat_model = DashScopeChatModel(
        credential=DashScopeCredential(api_key=api_key),
        model="qwen3.7-max",
        stream=False,
    )
    embedding_model = DashScopeEmbeddingModel(
        credential=DashScopeCredential(api_key=api_key),
        model="text-embedding-v4",
        dimensions=1536,
    )

    mw = Mem0Middleware(
        user_id="alice",
        chat_model=mem0_chat_model,
        embedding_model=embedding_model,
        mode="both",
    )

    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=agent_chat_model,
        toolkit=Toolkit(tools=await mw.list_tools()),
        middlewares=[mw],
    )

    # Memories written in this session resurface in later sessions
    # for the same ``user_id``.
    await agent.reply(
        UserMsg("alice", "Remember that I prefer dark-mode charts."),
    )


asyncio.run(main())
"""


def test_seed_quick_start_runs(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def reply(request: dict[str, Any]) -> str:
        if is_extraction(request["messages"]):
            return facts("Alice prefers dark-mode charts")
        return "Noted: dark-mode charts from now on."

    with OpenAICompatServer(default_reply=reply) as server:
        monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test")
        monkeypatch.setenv("DASHSCOPE_BASE_URL", server.base_url)
        monkeypatch.setenv("MNEMOSCOPE_MEM0_PATH", path)
        exec(compile(SEED_QUICK_START, "seed_quick_start.py", "exec"), {"__name__": "__main__"})
        gc.collect()  # the seed never closes its middleware: the finalizer releases it
        assert _REAPER.wait(30)  # in the cleanup thread (a finalizer takes no lock)
        chats = [r for r in server.requests if r.path.endswith("/chat/completions")]
        embeds = [r for r in server.requests if r.path.endswith("/embeddings")]
    assert len(chats) == 2  # the agent's answer, then mem0's extraction
    assert "search_memory" in json.dumps(chats[0]["tools"])
    assert is_extraction(chats[1]["messages"])
    assert "dark-mode charts" in json.dumps(chats[1]["messages"])
    assert embeds and all(r["dimensions"] == 1536 for r in embeds if "dimensions" in r)
    assert QDRANT_CLIENTS.refs(path) == 0 and not BRIDGE.running

    # the memory resurfaces in a later session for the same user_id
    async def later() -> list[str]:
        store = Mem0LongTermMemory(
            chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(1536), path=path
        )
        try:
            return [i.content for i in await store.retrieve("dark-mode charts", user_id="alice")]
        finally:
            await store.aclose()

    assert asyncio.run(later()) == ["Alice prefers dark-mode charts"]


# ------------------------------------------------------------------- modes
async def test_static_control_remembers_across_sessions(path: str, middlewares: list[Any]) -> None:
    mem0_chat = ScriptedChatModel([facts("Alice prefers dark-mode charts"), facts()])
    mw = mem0_mw(middlewares, path, mem0_chat, user_id="alice", mode="static_control")
    assert await mw.list_tools() == []
    agent, _ = await agent_with(mw, ["Noted."])
    events = [
        e
        async for e in agent.reply_stream(
            UserMsg("alice", "Remember that I prefer dark-mode charts.")
        )
    ]
    (write,) = [e for e in events if isinstance(e, MemoryEvent) and e.action == "write"]
    assert (
        write.source == "mem0"
        and write.data["added"][0]["content"] == "Alice prefers dark-mode charts"
    )
    # mem0's extraction ran through our chat model, on exactly the exchange
    section = new_messages(mem0_chat.calls[0])
    assert "Remember that I prefer dark-mode charts." in section and "Noted." in section

    # a new agent, a new session: the memory is injected before the model call
    agent2, model2 = await agent_with(mw, ["Dark mode it is."])
    await agent2.reply("Draw my sales charts, dark-mode or not?")
    injected = [m for m in model2.calls[0].messages if m.name == "memory"]
    assert len(injected) == 1 and "Alice prefers dark-mode charts" in injected[0].get_text_content()
    # the write-back of that reply holds the exchange, never the injected memory
    section = new_messages(mem0_chat.calls[1])
    assert "Draw my sales charts, dark-mode or not?" in section and "Dark mode it is." in section
    assert "Alice prefers dark-mode charts" not in section


async def test_agent_control_tools_with_mem0(path: str, middlewares: list[Any]) -> None:
    mem0_chat = ScriptedChatModel([])
    mw = mem0_mw(middlewares, path, mem0_chat, user_id="alice", mode="agent_control")
    agent, model = await agent_with(
        mw,
        [
            tool_call(
                "add_memory",
                thinking="a durable preference",
                content=["Alice prefers dark-mode charts.", "Alice lives in Hangzhou."],
            ),
            "Saved.",
            tool_call(
                "search_memory", keywords=["chart style", "dark-mode charts", "Hangzhou"], limit=5
            ),
            "You like dark-mode charts and live in Hangzhou.",
        ],
    )
    first = [e async for e in agent.reply_stream("I like dark-mode charts and live in Hangzhou")]
    (added,) = [e.result for e in first if e.type == "tool_result"]
    assert added.state == "success" and "Stored 2 of 2" in added.output_text()
    assert "search_memory" in model.calls[0].system_prompt  # the nudge
    second = [e async for e in agent.reply_stream("What do you know about me?")]
    (found,) = [e.result for e in second if e.type == "tool_result"]
    text = found.output_text()
    assert "Alice prefers dark-mode charts." in text and "Alice lives in Hangzhou." in text
    assert text.count("Alice prefers dark-mode charts.") == 1  # merged and de-duplicated
    # no automatic retrieval, no write-back, and tool adds store the sentences as given
    assert mem0_chat.calls == []
    assert all(m.name != "memory" for c in model.calls for m in c.messages)
    # storing the same fact again is reported, not duplicated
    again = await mw.add_memory("t", ["Alice lives in Hangzhou."])
    assert "Already in memory" in again.output and not again.is_error


async def test_both_mode(path: str, middlewares: list[Any]) -> None:
    mem0_chat = ScriptedChatModel([facts("Alice is 30 years old")])
    mw = mem0_mw(middlewares, path, mem0_chat, user_id="alice")
    assert mw.mode == "both" and len(await mw.list_tools()) == 2
    await mw.add_memory("t", ["Alice prefers tea."])
    agent, model = await agent_with(mw, ["Happy birthday!"])
    await agent.reply("I am 30 today and I prefer tea")
    assert any(
        m.name == "memory" and "Alice prefers tea." in m.get_text_content()
        for m in model.calls[0].messages
    )
    assert model.calls[0].tool_names == ["search_memory", "add_memory"]
    assert len(mem0_chat.calls) == 1  # the static write-back


# --------------------------------------------------------- construction paths
async def test_prebuilt_async_memory_as_client(path: str, middlewares: list[Any]) -> None:
    owner = mem0_mw(middlewares, path, user_id="alice")
    prebuilt = owner.client
    assert isinstance(prebuilt, mem0.AsyncMemory)
    ignored = ScriptedChatModel([])
    mw = Mem0Middleware(user_id="alice", client=prebuilt, chat_model=ignored, mode="agent_control")
    assert mw.client is prebuilt and mw.store.chat_model is None
    stored = await mw.add_memory("t", ["Alice prefers tea."])
    assert not stored.is_error
    await mw.aclose()
    found = await owner.search_memory(["tea"])  # the client was not closed
    assert "Alice prefers tea." in found.output
    # the agent may use the ignored model: the middleware does not run it
    Agent(
        name="a",
        system_prompt="",
        model=ignored,
        toolkit=Toolkit(tools=await mw.list_tools()),
        middlewares=[mw],
    )


def test_sync_clients_are_rejected() -> None:
    memory = mem0.Memory.__new__(mem0.Memory)
    with pytest.raises(UserError, match=r"mem0\.Memory.*synchronous.*AsyncMemory"):
        Mem0Middleware(user_id="alice", client=memory)
    client = mem0.MemoryClient.__new__(mem0.MemoryClient)
    with pytest.raises(UserError, match=r"AsyncMemoryClient"):
        Mem0Middleware(user_id="alice", client=client)


async def test_dimension_mismatch_fails_at_construction(path: str, middlewares: list[Any]) -> None:
    first = mem0_mw(middlewares, path, user_id="alice")
    await first.add_memory("t", ["Alice prefers tea."])
    await first.aclose()
    with pytest.raises(UserError, match=r"64-dimensional.*384-dimensional"):
        Mem0Middleware(
            user_id="alice",
            chat_model=ScriptedChatModel([]),
            embedding_model=HashEmbeddingModel(384),
            path=path,
        )
    assert QDRANT_CLIENTS.refs(path) == 0


def test_shared_model_instance_is_refused(path: str) -> None:
    shared = ScriptedChatModel([])
    mw = Mem0Middleware(
        user_id="alice",
        chat_model=shared,
        embedding_model=HashEmbeddingModel(64),
        path=path,
        mode="static_control",  # no tools to wire: only the model check is under test
    )
    try:
        with pytest.raises(UserError, match="share one chat-model instance"):
            Agent(name="a", system_prompt="", model=shared, middlewares=[mw])
        # a second object over the same HTTP client is the same hazard
        mem0_llm = OpenAIChatModel("m", api_key="sk-test", base_url="http://127.0.0.1:9/v1")
        twin = OpenAIChatModel("m", client=mem0_llm._client)
        mw2 = Mem0Middleware(
            user_id="a",
            chat_model=mem0_llm,
            embedding_model=HashEmbeddingModel(64),
            path=path,
            mode="static_control",
        )
        try:
            with pytest.raises(UserError, match="share one chat-model instance"):
                Agent(name="a", system_prompt="", model=twin, middlewares=[mw2])
            Agent(name="a", system_prompt="", model=ScriptedChatModel([]), middlewares=[mw2])
        finally:
            mw2.store.close_sync()
    finally:
        mw.store.close_sync()


# --------------------------------------------------------------------- scoping
async def test_users_never_see_each_other(path: str, middlewares: list[Any]) -> None:
    alice = mem0_mw(middlewares, path, user_id="alice", mode="agent_control")
    bob = mem0_mw(middlewares, path, user_id="bob", mode="static_control")
    await alice.add_memory("t", ["Alice's bank PIN hint is her cat's name."])
    agent, model = await agent_with(bob, ["No idea."])
    await agent.reply("What is the bank PIN hint?")
    assert all(m.name != "memory" for m in model.calls[0].messages)
    assert "No memories found" in (await bob.search_memory(["bank PIN hint"])).output


async def test_agent_scoping(path: str, middlewares: list[Any]) -> None:
    chef = mem0_mw(middlewares, path, user_id="alice", agent_id="chef", mode="agent_control")
    barista = mem0_mw(middlewares, path, user_id="alice", agent_id="barista", mode="agent_control")
    shared = mem0_mw(
        middlewares,
        path,
        user_id="alice",
        agent_id="barista",
        scope_search_by_agent=False,
        mode="agent_control",
    )
    await chef.add_memory("t", ["Alice is allergic to peanuts."])
    await barista.add_memory("t", ["Alice takes oat milk in coffee."])
    assert "allergic" not in (await barista.search_memory(["peanuts allergy", "milk"])).output
    assert "allergic" in (await chef.search_memory(["peanuts allergy"])).output
    both = (await shared.search_memory(["peanuts allergy", "oat milk"])).output
    assert "allergic" in both and "takes oat milk" in both
    items = await chef.store.retrieve("peanuts", user_id="alice", agent_id="chef")
    assert items[0].agent_id == "chef"


async def test_threshold(path: str, middlewares: list[Any]) -> None:
    loose = mem0_mw(middlewares, path, user_id="alice", mode="agent_control")
    strict = mem0_mw(middlewares, path, user_id="alice", mode="agent_control", threshold=0.99)
    await loose.add_memory("t", ["Alice plays the violin on weekends."])
    assert "violin" in (await loose.search_memory(["violin weekends"])).output
    assert "No memories found" in (await strict.search_memory(["violin weekends"])).output
    assert "violin" in (await strict.search_memory(["Alice plays the violin on weekends."])).output


# ------------------------------------------------------------- write-back paths
async def test_write_back_at_max_iters(path: str, middlewares: list[Any]) -> None:
    mem0_chat = ScriptedChatModel([facts()])
    mw = mem0_mw(middlewares, path, mem0_chat, user_id="alice", mode="static_control")
    noop = FunctionTool(lambda: "nothing", name="lookup")
    agent, _ = await agent_with(
        mw, [["Checking the archive.", tool_call("lookup")]], extra_tools=[noop], max_iters=1
    )
    msg = await agent.reply("Find my 2019 invoices")
    assert "max_iters" in msg.get_text_content()
    section = new_messages(mem0_chat.calls[0])
    assert "Find my 2019 invoices" in section and "Checking the archive." in section
    assert "max_iters" not in section and "reasoning steps" not in section


async def test_write_back_after_an_approved_permission_ask(
    path: str, middlewares: list[Any]
) -> None:
    mem0_chat = ScriptedChatModel([facts("Alice's site was deployed")])
    mw = mem0_mw(middlewares, path, mem0_chat, user_id="alice", mode="static_control")
    deploy = FunctionTool(lambda: "deployed to prod", name="deploy")
    agent, _ = await agent_with(
        mw, [tool_call("deploy"), "Your site is live."], extra_tools=[deploy]
    )
    perm = agent.state.permission_context
    perm.allow_rules.append(PermissionRule(tool="deploy", behavior="ask"))

    async def approve(request: Any) -> bool:
        assert mem0_chat.calls == []  # nothing written while waiting for the user
        return True

    perm.ask_callback = approve
    await agent.reply("Deploy my site")
    (call,) = mem0_chat.calls
    section = new_messages(call)
    assert "Deploy my site" in section and "Your site is live." in section
    assert "ermission" not in section and "waiting" not in section.lower()


async def test_no_write_back_for_a_failed_reply(path: str, middlewares: list[Any]) -> None:
    mem0_chat = ScriptedChatModel([])
    mw = mem0_mw(middlewares, path, mem0_chat, user_id="alice", mode="static_control")
    agent, _ = await agent_with(mw, [])
    with pytest.raises(Exception, match="ran out of responses"):
        await agent.reply("hello")
    assert mem0_chat.calls == []


async def test_background_write_is_flushed_by_aclose(path: str, middlewares: list[Any]) -> None:
    started, release = threading.Event(), asyncio.Event()

    async def slow(call: Any) -> str:
        started.set()
        await release.wait()
        return facts("Alice prefers window seats")

    mem0_chat = ScriptedChatModel([slow])
    mw = mem0_mw(
        middlewares, path, mem0_chat, user_id="alice", mode="static_control", await_write=False
    )
    agent, _ = await agent_with(mw, ["Noted."])
    await agent.reply("I prefer window seats")
    assert mw.pending_writes == 1
    await asyncio.to_thread(started.wait, 10)
    bridge_loop = BRIDGE._loop  # the extraction call is waiting on the bridge loop
    assert bridge_loop is not None
    bridge_loop.call_soon_threadsafe(release.set)
    await mw.aclose()
    assert mw.pending_writes == 0 and mw.failed_background_writes == 0
    check = Mem0LongTermMemory(
        chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    try:
        assert [i.content for i in await check.retrieve("window seats", user_id="alice")] == [
            "Alice prefers window seats"
        ]
    finally:
        await check.aclose()


# -------------------------------------------------------------------- failures
async def test_mem0_failures_are_loud_and_the_reply_goes_on(
    path: str, middlewares: list[Any]
) -> None:
    down_embedder = OpenAIEmbeddingModel(
        "emb", dimensions=64, api_key="sk-test", base_url="http://127.0.0.1:9/v1", max_retries=0
    )
    mw = mem0_mw(
        middlewares, path, ScriptedChatModel([]), user_id="alice", embedding_model=down_embedder
    )
    agent, _ = await agent_with(
        mw, [tool_call("add_memory", thinking="t", content=["Alice likes tea."]), "Sorry."]
    )
    events = [e async for e in agent.reply_stream("I like tea")]
    errors = [e for e in events if isinstance(e, MemoryEvent) and e.action == "error"]
    assert [e.data["phase"] for e in errors] == ["retrieve", "add_memory", "write"]
    (result,) = [e.result for e in events if e.type == "tool_result"]
    assert (
        result.state == "error"
        and "NOT stored" in result.output_text()
        and "Stored" not in result.output_text()
    )
    assert events[-1].msg.get_text_content() == "Sorry."


async def test_extraction_failure_and_timeout(path: str, middlewares: list[Any]) -> None:
    async def slow(call: Any) -> str:
        await asyncio.sleep(1.0)
        return facts()

    with OpenAICompatServer([HTTPErrorReply(500, "model overloaded")]) as server:
        llm = OpenAIChatModel("m", api_key="sk-test", base_url=server.base_url, max_retries=0)
        mw = mem0_mw(middlewares, path, llm, user_id="alice", mode="static_control")
        agent, _ = await agent_with(mw, ["Hi!"])
        events = [e async for e in agent.reply_stream("hello")]
        (error,) = [e for e in events if isinstance(e, MemoryEvent) and e.action == "error"]
        assert error.data["phase"] == "write" and "500" in error.message
        assert events[-1].msg.get_text_content() == "Hi!"

    mw2 = mem0_mw(
        middlewares,
        path + "2",
        ScriptedChatModel([slow]),
        user_id="alice",
        mode="static_control",
        write_timeout=0.2,
    )
    agent2, _ = await agent_with(mw2, ["Hi!"])
    events = [e async for e in agent2.reply_stream("hello")]
    (error,) = [e for e in events if isinstance(e, MemoryEvent) and e.action == "error"]
    assert "timed out after 0.2 s" in error.message


# ----------------------------------------------------------- loops and sharing
def test_middleware_survives_repeated_asyncio_run_and_threads(path: str) -> None:
    def reply(request: dict[str, Any]) -> str:
        return facts(f"fact {len(server.requests)}") if is_extraction(request["messages"]) else "ok"

    with OpenAICompatServer(default_reply=reply) as server:
        mem0_llm = OpenAIChatModel("m", api_key="sk-test", base_url=server.base_url)
        mw = Mem0Middleware(
            user_id="alice",
            chat_model=mem0_llm,
            embedding_model=HashEmbeddingModel(64),
            path=path,
            mode="static_control",
        )
        agent_llm = ScriptedChatModel(default="ok")
        agent = Agent(name="a", system_prompt="", model=agent_llm, middlewares=[mw])

        def one_reply(text: str) -> list[str]:
            async def run() -> list[str]:
                events = [e async for e in agent.reply_stream(text)]
                return [e.action for e in events if isinstance(e, MemoryEvent)]

            return asyncio.run(run())

        for i in range(3):
            assert one_reply(f"message {i}") == ["retrieve", "write"]
        results: list[Any] = []
        worker = threading.Thread(target=lambda: results.append(one_reply("from a worker thread")))
        worker.start()
        worker.join()
        assert results == [["retrieve", "write"]]
        asyncio.run(mw.aclose())
    assert not BRIDGE.running and QDRANT_CLIENTS.refs(path) == 0


async def test_two_middlewares_share_one_path(path: str, middlewares: list[Any]) -> None:
    embedder = HashEmbeddingModel(64)
    a = mem0_mw(middlewares, path, user_id="alice", mode="agent_control", embedding_model=embedder)
    b = mem0_mw(middlewares, path, user_id="alice", mode="agent_control", embedding_model=embedder)
    assert QDRANT_CLIENTS.refs(path) == 2
    await a.add_memory("t", ["Alice collects stamps."])
    assert "Alice collects stamps." in (await b.search_memory(["stamps"])).output
    await a.aclose()
    assert "Alice collects stamps." in (await b.search_memory(["stamps"])).output
