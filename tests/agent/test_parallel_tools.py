"""Concurrent tool calls within one model step (issue 12, item 1), through the real Agent.

Overlap is asserted from the start and end times each tool records (``a`` started before
``b`` ended and the other way round), never from a wall-clock limit.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from itertools import pairwise
from typing import Any

import pytest
from pydantic import BaseModel

from mnemoscope.agent import Agent
from mnemoscope.errors import UserError
from mnemoscope.message import ToolResultBlock, ToolUseBlock
from mnemoscope.middleware import (
    ActingContext,
    AgentEvent,
    MiddlewareBase,
    PermissionEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from mnemoscope.permission import PermissionDecision, PermissionMode, PermissionRequest
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import (
    Edit,
    FunctionTool,
    Glob,
    Grep,
    Read,
    ToolBase,
    ToolContext,
    Toolkit,
    ToolResult,
    Write,
)
from mnemoscope.workspace import LocalBackend

GUARD = 20.0
"""Seconds any reply in this file may take before the test fails instead of hanging."""

Span = tuple[float, float]


def overlap(a: Span, b: Span) -> bool:
    return a[0] < b[1] and b[0] < a[1]


class Spans:
    """Start and end time of every tool call, by call tag."""

    def __init__(self) -> None:
        self.by_tag: dict[str, Span] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []

    def started_event(self, tag: str) -> asyncio.Event:
        return self.started.setdefault(tag, asyncio.Event())


def sleeper(
    spans: Spans,
    name: str,
    seconds: float,
    *,
    read_only: bool = True,
    concurrency_safe: bool | None = None,
    timeout: float | None = None,
    fail: bool = False,
) -> FunctionTool:
    """An async tool that sleeps, recording its span under the call's ``tag``."""

    async def run(tag: str) -> str:
        start = time.monotonic()
        spans.started_event(tag).set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            spans.cancelled.append(tag)
            raise
        finally:
            spans.by_tag[tag] = (start, time.monotonic())
        if fail:
            raise RuntimeError(f"{tag} broke")
        return f"{name} done {tag}"

    return FunctionTool(
        run,
        name=name,
        description=f"Sleep {seconds} s.",
        is_read_only=read_only,
        concurrency_safe=concurrency_safe,
        timeout=timeout,
    )


def call(name: str, tag: str) -> ToolUseBlock:
    return tool_call(name, f"id_{tag}", tag=tag)


def make_agent(tools: list[ToolBase], steps: list[Any], **kwargs: Any) -> Agent:
    return Agent(
        name="a",
        system_prompt="s",
        model=ScriptedChatModel([*steps, "done"]),
        toolkit=Toolkit(tools=tools),
        **kwargs,
    )


async def run_reply(agent: Agent) -> list[AgentEvent]:
    async def collect() -> list[AgentEvent]:
        return [e async for e in agent.reply_stream("go")]

    return await asyncio.wait_for(collect(), GUARD)


def results_of(agent: Agent) -> list[ToolResultBlock]:
    model = agent.model
    assert isinstance(model, ScriptedChatModel)
    return [b for m in model.calls[-1].messages for b in m.tool_results]


# ------------------------------------------------------------------ call order
async def test_concurrent_results_come_back_in_call_order() -> None:
    spans = Spans()
    # the first call is the slowest: it finishes last, yet stays first
    tools: list[ToolBase] = [
        sleeper(spans, "slow", 0.3),
        sleeper(spans, "mid", 0.15),
        sleeper(spans, "fast", 0.0),
    ]
    agent = make_agent(tools, [[call("slow", "a"), call("mid", "b"), call("fast", "c")]])
    events = await run_reply(agent)
    assert [r.output for r in results_of(agent)] == ["slow done a", "mid done b", "fast done c"]
    assert [r.id for r in results_of(agent)] == ["id_a", "id_b", "id_c"]
    assert spans.by_tag["c"][1] < spans.by_tag["a"][1]  # completion order differed
    # events come out in call order, a call's use before its result, as serially
    seq = [
        (type(e).__name__, e.tool_use.id if isinstance(e, ToolUseEvent) else e.result.id)
        for e in events
        if isinstance(e, ToolUseEvent | ToolResultEvent)
    ]
    assert seq == [
        ("ToolUseEvent", "id_a"),
        ("ToolResultEvent", "id_a"),
        ("ToolUseEvent", "id_b"),
        ("ToolResultEvent", "id_b"),
        ("ToolUseEvent", "id_c"),
        ("ToolResultEvent", "id_c"),
    ]
    stored = await agent.memory.get()
    assert [b.id for b in stored[2].tool_results] == ["id_a", "id_b", "id_c"]


async def test_five_sleeping_calls_of_one_step_all_overlap() -> None:
    spans = Spans()
    agent = make_agent([sleeper(spans, "nap", 0.2)], [[call("nap", str(i)) for i in range(5)]])
    await run_reply(agent)
    assert all(r.state == "success" for r in results_of(agent))
    got = [spans.by_tag[str(i)] for i in range(5)]
    # every call started before any call ended: they ran at the same time
    assert max(s for s, _ in got) < min(e for _, e in got)


async def test_sync_tools_of_one_step_overlap_on_the_toolkit_threads() -> None:
    spans = Spans()

    def block(tag: str) -> str:
        start = time.monotonic()
        time.sleep(0.2)
        spans.by_tag[tag] = (start, time.monotonic())
        return tag

    tool = FunctionTool(block, is_read_only=True, concurrency_safe=True)  # thread-safe
    agent = make_agent([tool], [[call("block", str(i)) for i in range(4)]])
    await run_reply(agent)
    got = [spans.by_tag[str(i)] for i in range(4)]
    assert max(s for s, _ in got) < min(e for _, e in got)


async def test_sync_read_only_tools_run_one_at_a_time_unless_they_opt_in() -> None:
    spans = Spans()

    def block(tag: str) -> str:
        start = time.monotonic()
        time.sleep(0.1)
        spans.by_tag[tag] = (start, time.monotonic())
        return tag

    agent = make_agent(
        [FunctionTool(block, is_read_only=True)], [[call("block", t) for t in "abc"]]
    )
    await run_reply(agent)
    assert not overlap(spans.by_tag["a"], spans.by_tag["b"])
    assert not overlap(spans.by_tag["b"], spans.by_tag["c"])


async def test_the_thread_bound_of_the_toolkit_holds_in_a_parallel_step() -> None:
    busy = 0
    peak = 0
    lock = threading.Lock()

    def block(tag: str) -> str:
        nonlocal busy, peak
        with lock:
            busy += 1
            peak = max(peak, busy)
        time.sleep(0.05)
        with lock:
            busy -= 1
        return tag

    model = ScriptedChatModel([[call("block", str(i)) for i in range(6)], "done"])
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(
            tools=[FunctionTool(block, is_read_only=True, concurrency_safe=True)],
            max_tool_threads=2,
        ),
    )
    await run_reply(agent)
    assert [r.output for r in results_of(agent)] == [str(i) for i in range(6)]
    assert peak == 2


# ----------------------------------------------------------------- permissions
class _AskingReader(ToolBase):
    """A read-only tool that needs approval for every call."""

    name = "peek"
    description = "Peek."
    is_read_only = True

    class Input(BaseModel):
        tag: str

    def __init__(self, spans: Spans) -> None:
        self.spans = spans

    async def check_permissions(
        self, tool_input: BaseModel, ctx: ToolContext
    ) -> PermissionDecision | None:
        assert isinstance(tool_input, self.Input)
        return PermissionDecision(behavior="ask", message=f"peek at {tool_input.tag}?")

    async def call(self, tool_input: Any, ctx: ToolContext) -> ToolResult:
        start = time.monotonic()
        await asyncio.sleep(0.3)
        self.spans.by_tag[tool_input.tag] = (start, time.monotonic())
        return ToolResult(output=f"peeked {tool_input.tag}")


async def test_asks_in_a_parallel_step_come_one_at_a_time_in_call_order() -> None:
    spans = Spans()
    asks: list[tuple[str, float, float]] = []
    active = 0
    peak = 0

    async def approve(request: PermissionRequest) -> bool:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        start = time.monotonic()
        await asyncio.sleep(0.05)
        active -= 1
        asks.append((request.message, start, time.monotonic()))
        return "c" not in request.message  # the third call is declined

    agent = make_agent([_AskingReader(spans)], [[call("peek", t) for t in "abcd"]])
    agent.state.permission_context.ask_callback = approve
    events = await run_reply(agent)
    assert peak == 1
    assert [m for m, _, _ in asks] == [f"peek at {t}?" for t in "abcd"]
    for (_, _, end), (_, start, _) in pairwise(asks):
        assert end <= start
    out = [(r.state, r.output_text()[:12]) for r in results_of(agent)]
    assert out[0] == ("success", "peeked a")
    assert out[2][0] == "denied"
    assert out[3] == ("success", "peeked d")
    # approved calls still ran concurrently: the later asks happened while "a" ran
    assert overlap(spans.by_tag["a"], spans.by_tag["b"])
    assert overlap(spans.by_tag["b"], spans.by_tag["d"])
    perm = [(e.tool_use_id, e.approved) for e in events if isinstance(e, PermissionEvent)]
    assert perm == [("id_a", True), ("id_b", True), ("id_c", False), ("id_d", True)]


async def test_an_approval_rule_added_by_the_first_ask_is_seen_by_the_next_call() -> None:
    """Decisions are taken in call order: call 2 decides after call 1's ask finished."""
    spans = Spans()
    asked: list[str] = []

    class _Once(_AskingReader):
        async def check_permissions(
            self, tool_input: BaseModel, ctx: ToolContext
        ) -> PermissionDecision | None:
            if ctx.state.get("approved"):
                return PermissionDecision(behavior="allow")
            return await super().check_permissions(tool_input, ctx)

    agent = make_agent([_Once(spans)], [[call("peek", t) for t in "ab"]])

    async def approve_always(request: PermissionRequest) -> bool:
        await asyncio.sleep(0.05)
        asked.append(request.message)
        agent.state.tool_state["approved"] = True
        return True

    agent.state.permission_context.ask_callback = approve_always
    await run_reply(agent)
    assert asked == ["peek at a?"]
    assert [r.state for r in results_of(agent)] == ["success", "success"]


# ----------------------------------------------------------- failures, cancels
async def test_a_timeout_in_one_call_does_not_cancel_the_others() -> None:
    spans = Spans()
    tools: list[ToolBase] = [
        sleeper(spans, "hang", 30.0, timeout=0.1),
        sleeper(spans, "work", 0.4),
        sleeper(spans, "boom", 0.05, fail=True),
    ]
    agent = make_agent(
        tools, [[call("work", "w1"), call("hang", "h"), call("boom", "x"), call("work", "w2")]]
    )
    await run_reply(agent)
    res = results_of(agent)
    assert [r.state for r in res] == ["success", "error", "error", "success"]
    assert "timed out after 0.1 seconds" in res[1].output_text()
    assert "x broke" in res[2].output_text()
    assert spans.cancelled == ["h"]  # only the call past its limit was stopped
    # the others kept running after the timeout and the failure, to the end
    assert spans.by_tag["h"][1] < spans.by_tag["w1"][1]
    assert spans.by_tag["x"][1] < spans.by_tag["w2"][1]
    assert overlap(spans.by_tag["w1"], spans.by_tag["h"])


async def test_cancelling_the_reply_cancels_every_running_call() -> None:
    spans = Spans()
    agent = make_agent([sleeper(spans, "long", 30.0)], [[call("long", t) for t in "abc"]])
    task = asyncio.create_task(agent.reply("go"))
    for t in "abc":
        await asyncio.wait_for(spans.started_event(t).wait(), GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, GUARD)
    assert sorted(spans.cancelled) == ["a", "b", "c"]


class _Raising(MiddlewareBase):
    """Fails the acting phase of one call (a middleware bug)."""

    async def on_acting(self, ctx: ActingContext, next_handler: Any) -> AsyncIterator[AgentEvent]:  # type: ignore[override]
        if ctx.tool_use.id == "id_b":
            await asyncio.sleep(0.05)
            raise LookupError("middleware bug")
        async for event in next_handler(ctx):
            yield event


async def test_an_exception_escaping_a_call_fails_the_reply_and_stops_the_rest() -> None:
    spans = Spans()
    agent = make_agent(
        [sleeper(spans, "nap", 0.2), sleeper(spans, "long", 30.0)],
        [[call("nap", "a"), call("nap", "b"), call("long", "c")]],
        middlewares=[_Raising()],
    )
    with pytest.raises(LookupError, match="middleware bug"):
        await run_reply(agent)
    assert "a" in spans.by_tag and spans.cancelled == ["c"]


# -------------------------------------------------------------- safe / unsafe
async def test_unsafe_calls_never_overlap_and_keep_their_place() -> None:
    spans = Spans()
    tools: list[ToolBase] = [
        sleeper(spans, "look", 0.15),
        sleeper(spans, "change", 0.1, read_only=False),
    ]
    order = ["s1", "s2", "u1", "s3", "s4", "u2", "u3", "s5"]
    step = [call("change" if t.startswith("u") else "look", t) for t in order]
    agent = make_agent(tools, [step])
    await run_reply(agent)
    assert [r.output_text().split()[-1] for r in results_of(agent)] == order
    for u in ("u1", "u2", "u3"):
        for other in order:
            if other != u:
                assert not overlap(spans.by_tag[u], spans.by_tag[other]), (u, other)
    # each unsafe call starts after everything before it ended, and ends before the rest
    for i, tag in enumerate(order):
        if tag.startswith("u"):
            assert all(spans.by_tag[p][1] <= spans.by_tag[tag][0] for p in order[:i])
            assert all(spans.by_tag[tag][1] <= spans.by_tag[n][0] for n in order[i + 1 :])
    # the safe neighbours ran as batches
    assert overlap(spans.by_tag["s1"], spans.by_tag["s2"])
    assert overlap(spans.by_tag["s3"], spans.by_tag["s4"])


async def test_concurrency_safe_overrides_is_read_only_both_ways() -> None:
    spans = Spans()
    tools: list[ToolBase] = [
        sleeper(spans, "limited", 0.1, read_only=True, concurrency_safe=False),
        sleeper(spans, "upload", 0.2, read_only=False, concurrency_safe=True),
    ]
    agent = make_agent(
        tools,
        [
            [call("limited", "l1"), call("limited", "l2")],
            [call("upload", f"u{i}") for i in range(3)],
        ],
    )
    await run_reply(agent)
    assert not overlap(spans.by_tag["l1"], spans.by_tag["l2"])
    got = [spans.by_tag[f"u{i}"] for i in range(3)]
    assert max(s for s, _ in got) < min(e for _, e in got)


def test_which_tools_are_concurrency_safe() -> None:
    assert [t.is_concurrency_safe for t in (Read(), Glob(), Grep())] == [True] * 3
    assert [t.is_concurrency_safe for t in (Write(), Edit())] == [False, False]

    async def f(x: int) -> int:
        return x

    def sync_f(x: int) -> int:
        return x

    assert FunctionTool(f).is_concurrency_safe is False  # side effects: in order
    assert FunctionTool(f, is_read_only=True).is_concurrency_safe is True
    assert FunctionTool(f, is_read_only=True, concurrency_safe=False).is_concurrency_safe is False
    assert FunctionTool(f, concurrency_safe=True).is_concurrency_safe is True
    # a sync tool would run on several threads at once: only when it opts in
    assert FunctionTool(sync_f, is_read_only=True).is_concurrency_safe is False
    assert FunctionTool(sync_f, concurrency_safe=True).is_concurrency_safe is True
    toolkit = Toolkit(tools=[FunctionTool(f, is_read_only=True)])
    assert toolkit.is_concurrency_safe(tool_call("f", x=1))
    assert toolkit.is_concurrency_safe(tool_call("nope"))  # an unknown tool only errs


def test_a_bad_concurrency_safe_value_is_a_user_error() -> None:
    def f(x: int) -> int:
        return x

    with pytest.raises(UserError, match="concurrency_safe must be True, False or None"):
        FunctionTool(f, concurrency_safe="yes")  # type: ignore[arg-type]

    class Odd(ToolBase):
        name = "odd"

        class Input(BaseModel):
            pass

        concurrency_safe = 1  # type: ignore[assignment]

        async def call(self, tool_input: Any, ctx: ToolContext) -> ToolResult:
            return ToolResult()

    with pytest.raises(UserError, match="tool 'odd': concurrency_safe"):
        Toolkit(tools=[Odd()])


# --------------------------------------------------------------- middleware
class _Wrapper(MiddlewareBase):
    def __init__(self) -> None:
        self.spans: dict[str, Span] = {}

    async def on_acting(self, ctx: ActingContext, next_handler: Any) -> AsyncIterator[AgentEvent]:  # type: ignore[override]
        start = time.monotonic()
        async for event in next_handler(ctx):
            yield event
        assert ctx.result is not None and ctx.result.state == "success"
        self.spans[ctx.tool_use.id] = (start, time.monotonic())


async def test_on_acting_still_wraps_each_concurrent_call() -> None:
    spans = Spans()
    mw = _Wrapper()
    agent = make_agent(
        [sleeper(spans, "nap", 0.2)], [[call("nap", t) for t in "abc"]], middlewares=[mw]
    )
    await run_reply(agent)
    assert sorted(mw.spans) == ["id_a", "id_b", "id_c"]
    for t in "abc":  # each wrapper span holds its own call
        outer, inner = mw.spans[f"id_{t}"], spans.by_tag[t]
        assert outer[0] <= inner[0] and inner[1] <= outer[1]
    assert overlap(mw.spans["id_a"], mw.spans["id_c"])


# ---------------------------------------------------------------- file tools
async def test_file_tools_mixed_in_one_step_keep_read_before_write(tmp_path: Any) -> None:
    (tmp_path / "a.txt").write_text("one\n")
    (tmp_path / "b.txt").write_text("two\n")
    backend = LocalBackend(cwd=str(tmp_path))
    tools: list[ToolBase] = [Read(backend), Write(backend), Glob(backend), Grep(backend)]
    a, b = str(tmp_path / "a.txt"), str(tmp_path / "b.txt")
    step = [
        tool_call("Read", "r1", file_path=a),
        tool_call("Glob", "g1", pattern="*.txt"),
        tool_call("Write", "w1", file_path=a, content="uno\n"),
        tool_call("Read", "r2", file_path=a),
        tool_call("Grep", "g2", pattern="two"),
        tool_call("Read", "r3", file_path=b),
    ]
    agent = make_agent(tools, [step])
    agent.state.permission_context.cwd = str(tmp_path)
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    await run_reply(agent)
    res = {r.id: r for r in results_of(agent)}
    assert [r.id for r in results_of(agent)] == ["r1", "g1", "w1", "r2", "g2", "r3"]
    assert all(r.state == "success" for r in res.values()), res
    assert "one" in res["r1"].output_text()
    assert "uno" in res["r2"].output_text()  # the write ran between the two batches
    assert "b.txt:1:two" in res["g2"].output_text()
