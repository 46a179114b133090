"""The generic long-term-memory middleware over a tiny, real in-test store.

``WordStore`` below is test scaffolding for the generic layer (modes, tools, injection,
write-back, failure reporting): a list of texts ranked by the share of query words they
contain. Failure switches stand for a backend that is down or hangs.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from typing import Any

import pytest

from mnemoscope.agent import Agent
from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory import (
    LongTermMemoryBase,
    MemoryItem,
    RecordEvent,
    RecordRequest,
    RecordResult,
    RetrieveRequest,
)
from mnemoscope.message import Msg, UserMsg
from mnemoscope.middleware import LongTermMemoryMiddleware, MemoryEvent, ReplyEndEvent
from mnemoscope.permission import PermissionRule
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import FunctionTool, Toolkit

_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


class WordStore(LongTermMemoryBase):
    """Memories in a list; relevance = share of the query's words a memory contains."""

    def __init__(self) -> None:
        self.items: list[MemoryItem] = []
        self.record_calls: list[dict[str, Any]] = []
        self.fail_retrieve = False
        self.fail_record = False
        self.keep_nothing = False
        self.hang: asyncio.Event | None = None
        self.record_gate: asyncio.Event | None = None
        self.closed = False

    async def _record(self, request: RecordRequest) -> RecordResult:
        scope = request.scope
        for gate in (self.hang, self.record_gate):
            if gate is not None:
                await gate.wait()
        if self.fail_record:
            raise MemoryStoreError("connection refused")
        parts = request.content if isinstance(request.content, list) else [request.content]
        texts = [
            (p.role, p.get_text_content()) if isinstance(p, Msg) else ("user", p) for p in parts
        ]
        self.record_calls.append(
            {
                "texts": texts,
                "user_id": scope.user_id,
                "agent_id": scope.agent_id,
                "infer": request.infer,
            }
        )
        if self.keep_nothing:
            return RecordResult()
        events = []
        for role, text in texts:
            item = MemoryItem(
                id=uuid.uuid4().hex,
                content=text,
                **scope.model_dump(),
                metadata={"role": role},
            )
            self.items.append(item)
            events.append(RecordEvent(event="add", item=item))
        return RecordResult(events=events)

    async def _retrieve(self, request: RetrieveRequest) -> list[MemoryItem]:
        scope, threshold = request.scope, request.threshold
        if self.hang is not None:
            await self.hang.wait()
        if self.fail_retrieve:
            raise MemoryStoreError("connection refused")
        q = _words(request.query)
        hits = []
        for item in self.items:
            if item.user_id != scope.user_id:
                continue
            if scope.agent_id is not None and item.agent_id != scope.agent_id:
                continue
            if scope.run_id is not None and item.run_id != scope.run_id:
                continue
            score = len(q & _words(item.content)) / len(q) if q else 0.0
            if score <= 0 or (threshold is not None and score < threshold):
                continue
            hits.append(item.model_copy(update={"score": score}))
        hits.sort(key=lambda i: i.score or 0.0, reverse=True)
        return hits[: request.limit]

    async def aclose(self) -> None:
        self.closed = True

    def texts(self) -> list[str]:
        return [i.content for i in self.items]


async def seeded(*facts: str, user_id: str = "alice", agent_id: str | None = None) -> WordStore:
    store = WordStore()
    for fact in facts:
        await store.record(fact, user_id=user_id, agent_id=agent_id)
    store.record_calls.clear()
    return store


async def make_agent(
    mw: LongTermMemoryMiddleware, responses: list[Any], *, extra_tools: list[Any] = (), **kw: Any
) -> tuple[Agent, ScriptedChatModel]:
    model = ScriptedChatModel(responses)
    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=[*await mw.list_tools(), *extra_tools]),
        middlewares=[mw],
        **kw,
    )
    return agent, model


async def collect(agent: Agent, msg: Any) -> list[Any]:
    return [e async for e in agent.reply_stream(msg)]


def memory_events(events: list[Any], action: str | None = None) -> list[MemoryEvent]:
    return [
        e for e in events if isinstance(e, MemoryEvent) and (action is None or e.action == action)
    ]


# ------------------------------------------------------------------ construction
def test_constructor_validates() -> None:
    store = WordStore()
    with pytest.raises(UserError, match="mode must be one of"):
        LongTermMemoryMiddleware(store, user_id="a", mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="user_id"):
        LongTermMemoryMiddleware(store, user_id="")
    with pytest.raises(UserError, match="top_k"):
        LongTermMemoryMiddleware(store, user_id="a", top_k=0)
    with pytest.raises(UserError, match="LongTermMemoryBase"):
        LongTermMemoryMiddleware(object(), user_id="a")  # type: ignore[arg-type]


async def test_tools_per_mode() -> None:
    store = WordStore()
    assert (
        await LongTermMemoryMiddleware(store, user_id="a", mode="static_control").list_tools() == []
    )
    for mode in ("agent_control", "both"):
        tools = await LongTermMemoryMiddleware(store, user_id="a", mode=mode).list_tools()  # type: ignore[arg-type]
        assert [t.name for t in tools] == ["search_memory", "add_memory"]
        assert all(t.auto_allow for t in tools)
        search = tools[0].schema()["input_schema"]
        assert search["properties"]["limit"]["default"] == 5
        assert "ctx" not in search["properties"]
        assert set(tools[1].schema()["input_schema"]["required"]) == {"thinking", "content"}


async def test_search_tool_default_limit_is_top_k() -> None:
    mw = LongTermMemoryMiddleware(WordStore(), user_id="a", top_k=3)
    (search, _add) = await mw.list_tools()
    assert search.schema()["input_schema"]["properties"]["limit"]["default"] == 3


# -------------------------------------------------------------------- static mode
async def test_static_injects_memories_and_writes_back_the_exchange() -> None:
    store = await seeded("Alice prefers dark-mode charts.", "Alice lives in Hangzhou.")
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    agent, model = await make_agent(mw, ["Here is your chart, in dark mode."])

    events = await collect(agent, "Draw my sales charts please")

    sent = model.calls[0].messages
    memory_msgs = [m for m in sent if m.name == "memory"]
    assert len(memory_msgs) == 1 and memory_msgs[0].role == "assistant"
    assert "Alice prefers dark-mode charts." in memory_msgs[0].get_text_content()
    assert "Hangzhou" not in memory_msgs[0].get_text_content()  # not relevant to the query
    # injected right before the user's message
    assert sent.index(memory_msgs[0]) == len(sent) - 2
    assert sent[-1].get_text_content() == "Draw my sales charts please"
    assert model.calls[0].tool_names == []  # no tools in static mode
    assert "search_memory" not in model.calls[0].system_prompt

    retrieve = memory_events(events, "retrieve")
    assert (
        len(retrieve) == 1
        and retrieve[0].data["items"][0]["content"] == "Alice prefers dark-mode charts."
    )
    write = memory_events(events, "write")
    assert len(write) == 1 and len(write[0].data["added"]) == 2
    assert isinstance(events[-1], ReplyEndEvent)
    assert events.index(write[0]) < len(events) - 1  # before the ReplyEndEvent

    assert store.record_calls == [
        {
            "texts": [
                ("user", "Draw my sales charts please"),
                ("assistant", "Here is your chart, in dark mode."),
            ],
            "user_id": "alice",
            "agent_id": None,
            "infer": None,
        }
    ]
    # the injected memory is shown, never stored in the session history
    stored = await agent.memory.get()
    assert all(m.name != "memory" for m in stored)


async def test_static_without_hits_injects_nothing() -> None:
    store = await seeded("Alice prefers dark-mode charts.")
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    agent, model = await make_agent(mw, ["Hi!"])
    events = await collect(agent, "hello there")
    assert all(m.name != "memory" for m in model.calls[0].messages)
    (event,) = memory_events(events, "retrieve")
    assert event.data["items"] == [] and event.message == "no relevant memories"


async def test_memories_are_injected_for_one_reply_only() -> None:
    store = await seeded("Alice prefers dark-mode charts.")
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control", await_write=True)
    agent, model = await make_agent(mw, ["ok", "ok"])
    await agent.reply("charts")
    await agent.reply("what is the weather")
    second = model.calls[1].messages
    assert [m.get_text_content() for m in second if m.name == "memory"] == []


# --------------------------------------------------------------- agent-control mode
async def test_agent_control_has_tools_and_nudge_but_no_automatic_memory() -> None:
    store = await seeded("Alice prefers dark-mode charts.")
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="agent_control")
    agent, model = await make_agent(mw, ["Sure."])
    events = await collect(agent, "Draw my charts")
    call = model.calls[0]
    assert call.tool_names == ["search_memory", "add_memory"]
    assert "search_memory" in call.system_prompt and "add_memory" in call.system_prompt
    assert "named 'memory'" not in call.system_prompt
    assert all(m.name != "memory" for m in call.messages)
    assert memory_events(events) == []
    assert store.record_calls == []


@pytest.mark.parametrize("mode", ["agent_control", "both"])
async def test_a_mode_with_tools_but_none_in_the_toolkit_is_refused(mode: str) -> None:
    mw = LongTermMemoryMiddleware(WordStore(), user_id="alice", mode=mode)  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"none of them is in the toolkit.*list_tools\(\)"):
        Agent(name="a", system_prompt="Base.", model=ScriptedChatModel(["ok"]), middlewares=[mw])
    # tools of the same name from another instance are not this middleware's tools
    other = await LongTermMemoryMiddleware(WordStore(), user_id="bob", mode=mode).list_tools()  # type: ignore[arg-type]
    with pytest.raises(UserError, match="none of them"):
        Agent(
            name="a",
            system_prompt="Base.",
            model=ScriptedChatModel(["ok"]),
            toolkit=Toolkit(tools=other),
            middlewares=[mw],
        )


async def test_the_nudge_names_only_the_tools_in_the_toolkit() -> None:
    mw = LongTermMemoryMiddleware(WordStore(), user_id="alice", mode="agent_control")
    search, _add = await mw.list_tools()
    model = ScriptedChatModel(["ok"])
    agent = Agent(
        name="a",
        system_prompt="Base.",
        model=model,
        toolkit=Toolkit(tools=[search]),
        middlewares=[mw],
    )
    await agent.reply("hi")
    assert "search_memory" in model.calls[0].system_prompt
    assert "add_memory" not in model.calls[0].system_prompt


async def test_both_mode_injects_and_offers_tools() -> None:
    store = await seeded("Alice prefers dark-mode charts.")
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="both")
    agent, model = await make_agent(mw, ["ok"])
    await agent.reply("charts")
    call = model.calls[0]
    assert call.tool_names == ["search_memory", "add_memory"]
    assert "named 'memory'" in call.system_prompt
    assert any(m.name == "memory" for m in call.messages)
    assert len(store.record_calls) == 1


# -------------------------------------------------------------------------- tools
async def test_search_memory_merges_keywords_and_keeps_best_score() -> None:
    store = await seeded(
        "Alice prefers dark-mode charts.",
        "Alice drinks green tea.",
        "Alice lives in Hangzhou.",
        "Bob likes charts.",
        user_id="alice",
    )
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="agent_control")
    result = await mw.search_memory(["dark-mode charts", "charts", "green tea", "  "], limit=5)
    assert not result.is_error
    ids = result.metadata["ids"]
    assert len(ids) == len(set(ids)) == 3  # the charts memory matched twice, listed once
    lines = result.output.splitlines()[1:]
    assert lines[0].startswith("- Alice prefers dark-mode charts.") and "(score 1.00)" in lines[0]
    assert not any("Hangzhou" in line for line in lines)
    limited = await mw.search_memory(["charts", "tea"], limit=1)
    assert len(limited.metadata["ids"]) == 1


async def test_search_memory_rejects_empty_keywords() -> None:
    mw = LongTermMemoryMiddleware(WordStore(), user_id="alice")
    result = await mw.search_memory(["", "  "])
    assert result.is_error and "keyword" in result.output


async def test_tools_run_through_the_agent_and_allow_themselves() -> None:
    store = await seeded("Alice prefers dark-mode charts.")
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="agent_control")
    agent, _model = await make_agent(
        mw,
        [
            tool_call("search_memory", keywords=["charts"]),
            tool_call(
                "add_memory",
                thinking="she told me",
                content=["Alice's dog is called Rex.", "Alice is 30."],
            ),
            "Done.",
        ],
    )
    # an "ask everything" rule and no one to approve: the memory tools still run
    agent.state.permission_context.allow_rules.append(PermissionRule(tool="*", behavior="ask"))
    events = await collect(agent, "my dog is Rex and I am 30")
    results = [e.result for e in events if e.type == "tool_result"]
    assert [r.state for r in results] == ["success", "success"]
    assert "Alice prefers dark-mode charts." in results[0].output_text()
    assert "Stored 2 of 2 memories" in results[1].output_text()
    assert store.texts()[-2:] == ["Alice's dog is called Rex.", "Alice is 30."]
    # each sentence is its own record call; thinking is never stored; tool adds do not infer
    assert [c["texts"] for c in store.record_calls] == [
        [("user", "Alice's dog is called Rex.")],
        [("user", "Alice is 30.")],
    ]
    assert all(c["infer"] is False for c in store.record_calls)
    assert not any("she told me" in t for t in store.texts())
    assert {e.data.get("phase") for e in memory_events(events)} == {"search_memory", "add_memory"}


async def test_add_memory_reports_duplicates_and_never_claims_empty_success() -> None:
    store = await seeded("Alice is 30.")
    mw = LongTermMemoryMiddleware(store, user_id="alice")
    again = await mw.add_memory("t", ["alice is 30.", "Alice has a cat."])
    assert not again.is_error
    assert "Stored 1 of 2" in again.output and "Already in memory" in again.output
    assert store.texts() == ["Alice is 30.", "Alice has a cat."]

    empty = await mw.add_memory("t", ["", "   "])
    assert empty.is_error and "nothing was stored" in empty.output

    store.keep_nothing = True
    nothing = await mw.add_memory("t", ["Alice has two cats."])
    assert nothing.is_error and "NOT stored" in nothing.output and "kept nothing" in nothing.output
    assert "Stored" not in nothing.output


async def test_add_memory_failure_is_an_error_result() -> None:
    store = WordStore()
    store.fail_record = True
    mw = LongTermMemoryMiddleware(store, user_id="alice")
    result = await mw.add_memory("t", ["Alice is 30."])
    assert result.is_error and "connection refused" in result.output


async def test_search_memory_failure_is_an_error_result() -> None:
    store = WordStore()
    store.fail_retrieve = True
    mw = LongTermMemoryMiddleware(store, user_id="alice")
    result = await mw.search_memory(["charts"])
    assert result.is_error
    assert (
        "connection refused" in result.output and "do not assume memory is empty" in result.output
    )


async def test_tool_timeouts_are_reported() -> None:
    store = WordStore()
    store.hang = asyncio.Event()
    mw = LongTermMemoryMiddleware(store, user_id="alice", search_timeout=0.05, write_timeout=0.05)
    search = await mw.search_memory(["charts"])
    assert search.is_error and "timed out after 0.05 s" in search.output
    add = await mw.add_memory("t", ["Alice is 30."])
    assert add.is_error and "timed out" in add.output
    store.hang.set()


# ------------------------------------------------------------------------ scoping
async def test_scoping_by_user_agent_and_threshold() -> None:
    store = WordStore()
    await store.record("Alice prefers dark-mode charts.", user_id="alice", agent_id="planner")
    await store.record("Bob prefers light-mode charts.", user_id="bob", agent_id="planner")
    await store.record("Alice wants bar charts.", user_id="alice", agent_id="writer")

    bob = LongTermMemoryMiddleware(store, user_id="bob")
    out = await bob.search_memory(["charts"])
    assert "Bob prefers" in out.output and "Alice" not in out.output

    scoped = LongTermMemoryMiddleware(store, user_id="alice", agent_id="planner")
    out = await scoped.search_memory(["charts"])
    assert "dark-mode" in out.output and "bar charts" not in out.output

    shared = LongTermMemoryMiddleware(
        store, user_id="alice", agent_id="planner", scope_search_by_agent=False
    )
    out = await shared.search_memory(["charts"])
    assert "dark-mode" in out.output and "bar charts" in out.output and "Bob" not in out.output

    # writes are always tagged with the agent_id
    await shared.add_memory("t", ["Alice likes pie charts."])
    assert store.items[-1].agent_id == "planner" and store.items[-1].user_id == "alice"

    strict = LongTermMemoryMiddleware(
        store, user_id="alice", threshold=0.9, scope_search_by_agent=False
    )
    out = await strict.search_memory(["bar charts please"])  # 2 of 3 words at best
    assert out.metadata["ids"] == []
    loose = LongTermMemoryMiddleware(
        store, user_id="alice", threshold=0.5, scope_search_by_agent=False
    )
    assert len((await loose.search_memory(["bar charts please"])).metadata["ids"]) == 1


# ---------------------------------------------------------- write-back exit paths
async def test_write_back_at_max_iters_uses_the_last_answer_not_the_notice() -> None:
    store = WordStore()
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    noop = FunctionTool(lambda: "ok", name="noop")
    agent, _model = await make_agent(
        mw,
        [["Looking it up.", tool_call("noop")], ["Still looking.", tool_call("noop")]],
        extra_tools=[noop],
        max_iters=2,
    )
    events = await collect(agent, "find my file")
    assert events[-1].exit_reason == "max_iters"
    (call,) = store.record_calls
    assert call["texts"] == [("user", "find my file"), ("assistant", "Still looking.")]
    assert not any("max_iters" in t for _, t in call["texts"])


async def test_write_back_at_max_iters_without_any_text_stores_only_the_input() -> None:
    store = WordStore()
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    noop = FunctionTool(lambda: "ok", name="noop")
    agent, _ = await make_agent(mw, [tool_call("noop")], extra_tools=[noop], max_iters=1)
    await agent.reply("find my file")
    assert store.record_calls[0]["texts"] == [("user", "find my file")]


@pytest.mark.parametrize("approve", [True, False])
async def test_write_back_after_a_permission_ask_stores_the_real_answer(approve: bool) -> None:
    store = WordStore()
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    deploy = FunctionTool(lambda: "deployed", name="deploy")
    agent, _ = await make_agent(
        mw,
        [tool_call("deploy"), "The site is live." if approve else "I could not deploy."],
        extra_tools=[deploy],
    )
    perm = agent.state.permission_context
    perm.allow_rules.append(PermissionRule(tool="deploy", behavior="ask"))
    asked: list[str] = []

    async def ask(request: Any) -> bool:
        asked.append(request.tool_name)
        # while the user decides, nothing has been written to long-term memory
        assert store.record_calls == []
        return approve

    perm.ask_callback = ask
    events = await collect(agent, "deploy my site")
    assert asked == ["deploy"]
    assert any(e.type == "permission" and e.approved is approve for e in events)
    (call,) = store.record_calls
    answer = "The site is live." if approve else "I could not deploy."
    assert call["texts"] == [("user", "deploy my site"), ("assistant", answer)]
    assert not any("ermission" in t for _, t in call["texts"])


async def test_no_write_back_when_the_reply_fails() -> None:
    store = WordStore()
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    agent, _ = await make_agent(mw, [])  # the model has nothing to say: ModelCallError
    with pytest.raises(Exception, match="ran out of responses"):
        await agent.reply("hello")
    assert store.record_calls == []


async def test_no_write_back_when_the_reply_is_interrupted() -> None:
    store = WordStore()
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    agent, _ = await make_agent(mw, ["A long answer."])
    stream = agent.reply_stream("hello")
    async for event in stream:
        if event.type == "text_delta":
            break  # the user stops reading mid-answer
    await stream.aclose()
    assert store.record_calls == []


async def test_no_write_back_when_the_reply_task_is_cancelled() -> None:
    store = WordStore()
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    started = asyncio.Event()

    async def slow(call: Any) -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    agent, _ = await make_agent(mw, [slow])
    task = asyncio.create_task(agent.reply("hello"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store.record_calls == []


# ----------------------------------------------------------------- static failures
async def test_static_search_failure_is_reported_and_the_reply_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = WordStore()
    store.fail_retrieve = True
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    agent, _ = await make_agent(mw, ["Hello!"])
    with caplog.at_level(logging.WARNING, logger="mnemoscope.middleware.long_term"):
        events = await collect(agent, "hi")
    (error,) = memory_events(events, "error")
    assert error.data["phase"] == "retrieve" and "connection refused" in error.message
    assert events[-1].msg.get_text_content() == "Hello!"
    assert "search failed" in caplog.text
    assert len(store.record_calls) == 1  # the write still happened


async def test_static_write_failure_is_reported_and_the_reply_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = WordStore()
    store.fail_record = True
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    agent, _ = await make_agent(mw, ["Hello!"])
    with caplog.at_level(logging.WARNING, logger="mnemoscope.middleware.long_term"):
        events = await collect(agent, "hi")
    (error,) = memory_events(events, "error")
    assert error.data["phase"] == "write" and "connection refused" in error.message
    assert memory_events(events, "write") == []
    assert isinstance(events[-1], ReplyEndEvent)
    assert "write failed" in caplog.text


async def test_static_timeouts_are_reported() -> None:
    store = WordStore()
    store.hang = asyncio.Event()
    mw = LongTermMemoryMiddleware(
        store, user_id="alice", mode="static_control", search_timeout=0.05, write_timeout=0.05
    )
    agent, _ = await make_agent(mw, ["Hello!"])
    events = await collect(agent, "hi")
    errors = memory_events(events, "error")
    assert [e.data["phase"] for e in errors] == ["retrieve", "write"]
    assert all("timed out" in e.message for e in errors)
    store.hang.set()


async def test_store_keeping_nothing_is_not_reported_as_stored() -> None:
    store = WordStore()
    store.keep_nothing = True
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    agent, _ = await make_agent(mw, ["Hello!"])
    (write,) = memory_events(await collect(agent, "hi"), "write")
    assert write.data["added"] == [] and "nothing new" in write.message


# -------------------------------------------------------------- background writes
async def test_background_writes_are_tracked_and_flushed() -> None:
    store = WordStore()
    gate = asyncio.Event()
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control", await_write=False)
    agent, _ = await make_agent(mw, ["Hello!", "Again!"])
    store.record_gate = gate
    events = await collect(agent, "hi")
    (write,) = memory_events(events, "write")
    assert write.data == {"background": True}
    assert mw.pending_writes == 1  # the write outlives the reply
    await collect(agent, "hi again")
    assert mw.pending_writes == 2
    gate.set()
    await mw.aclose()
    assert mw.pending_writes == 0
    assert sorted(c["texts"][1][1] for c in store.record_calls) == ["Again!", "Hello!"]
    assert not store.closed  # the middleware did not build the store: it does not close it


async def test_background_write_failure_is_logged_and_emitted_while_the_stream_is_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = WordStore()
    store.fail_record = True
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control", await_write=False)
    agent, _ = await make_agent(mw, ["Hello!"])
    with caplog.at_level(logging.WARNING, logger="mnemoscope.middleware.long_term"):
        events = []
        async for event in agent.reply_stream("hi"):
            events.append(event)
            if isinstance(event, MemoryEvent) and event.action == "write":
                await asyncio.sleep(0.01)  # let the background write fail while the stream is open
        await mw.aclose()
    assert mw.failed_background_writes == 1
    assert "background long-term memory write failed" in caplog.text
    errors = memory_events(events, "error")
    assert len(errors) == 1 and "connection refused" in errors[0].message


async def test_close_store_closes_it() -> None:
    store = WordStore()
    mw = LongTermMemoryMiddleware(store, user_id="alice", close_store=True)
    await mw.aclose()
    await mw.aclose()
    assert store.closed


async def test_one_middleware_serves_concurrent_replies() -> None:
    store = await seeded("Alice prefers dark-mode charts.", "Alice drinks green tea.")
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    a1, m1 = await make_agent(mw, ["charts answer"])
    a2, m2 = await make_agent(mw, ["tea answer"])
    await asyncio.gather(a1.reply("charts"), a2.reply("green tea"))
    mem1 = [m.get_text_content() for m in m1.calls[0].messages if m.name == "memory"]
    mem2 = [m.get_text_content() for m in m2.calls[0].messages if m.name == "memory"]
    assert "charts" in mem1[0] and "tea" not in mem1[0]
    assert "tea" in mem2[0] and "charts" not in mem2[0]
    pairs = sorted(tuple(t for _, t in c["texts"]) for c in store.record_calls)
    assert pairs == [("charts", "charts answer"), ("green tea", "tea answer")]


async def test_the_input_msg_as_given_is_stored_by_name() -> None:
    store = WordStore()
    mw = LongTermMemoryMiddleware(store, user_id="alice", mode="static_control")
    agent, _ = await make_agent(mw, ["Noted."])
    await agent.reply(UserMsg("alice", "I prefer tea."))
    assert store.record_calls[0]["texts"] == [("user", "I prefer tea."), ("assistant", "Noted.")]
