"""Hardening of tool execution (issue 10, items 9, 10 and 17), through the real Agent.

* 9: tool time limits; sync tools run on the toolkit's bounded pool of daemon threads,
  never on the loop's default executor, so hung tools starve nothing else;
* 10: what of a tool's output reaches the model is bounded (head + tail + marker); the
  full text is stored next to the result, bounded, and never sent;
* 17: nothing a tool does crashes the reply.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from mnemoscope.agent import FULL_OUTPUTS_KEY, Agent
from mnemoscope.errors import UserError
from mnemoscope.memory import InMemoryMemory
from mnemoscope.message import ImageBlock, Msg, TextBlock, ToolResultBlock, ToolUseBlock, URLSource
from mnemoscope.model._anthropic_formatter import format_anthropic_messages
from mnemoscope.model._openai_formatter import format_openai_messages
from mnemoscope.permission import PermissionContext, PermissionMode
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import (
    FunctionTool,
    Read,
    ToolBase,
    ToolContext,
    Toolkit,
    ToolResult,
    function_tool,
)
from mnemoscope.tool._output import MAX_STORED_OUTPUT_CHARS, describe_exception

REPLY_LIMIT = 60.0
"""No test reply may take longer than this (the bug being fixed is a hang)."""


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown, so the hung tools' threads end with the test."""
    event = threading.Event()
    yield event
    event.set()


def _results(model: ScriptedChatModel, call: int) -> list[ToolResultBlock]:
    return [b for m in model.calls[call].messages for b in m.tool_results]


async def _reply(agent: Agent, text: str) -> Msg:
    return await asyncio.wait_for(agent.reply(text), REPLY_LIMIT)


# ------------------------------------------------------------------ item 9: timeouts
async def test_hung_sync_tools_time_out_and_file_tools_and_to_thread_still_work(
    tmp_path: Any, release: threading.Event
) -> None:
    def hang(n: int) -> str:
        """Never returns (until the test ends)."""
        release.wait()
        return "too late"

    def quick(x: int) -> str:
        """Answers at once."""
        return f"quick {x}"

    note = tmp_path / "note.txt"
    note.write_text("hello from disk\n")
    # more hung calls than the default executor has threads on a small machine
    hung = [tool_call("hang", n=i) for i in range(8)]
    model = ScriptedChatModel(
        [hung, [tool_call("quick", x=1), tool_call("Read", file_path=str(note))], "done"]
    )
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(tools=[FunctionTool(hang, timeout=0.2), quick, Read()]),
    )
    agent.state.permission_context = PermissionContext(
        mode=PermissionMode.BYPASS, cwd=str(tmp_path)
    )
    reply = await _reply(agent, "go")
    assert reply.get_text_content() == "done"
    timed_out = _results(model, 1)
    assert len(timed_out) == 8
    for res in timed_out:
        assert res.state == "error" and res.is_error
        assert "hang timed out after 0.2 seconds" in res.output_text()
    after = _results(model, 2)[8:]
    assert after[0].state == "success" and after[0].output_text() == "quick 1"
    assert after[1].state == "success" and "hello from disk" in after[1].output_text()
    # the loop's default executor was never used by the hung tools
    assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), 10) == 42


async def test_hung_tools_are_bounded_and_the_pool_recovers(release: threading.Event) -> None:
    def hang(n: int) -> str:
        """Blocks until released."""
        release.wait()
        return "late"

    def quick() -> str:
        """Answers at once."""
        return "ok"

    # the toolkit's default limit applies to hang; quick has room for a slow machine
    kit = Toolkit(tools=[hang, FunctionTool(quick, timeout=30)], timeout=0.1, max_tool_threads=2)

    async def run(use: ToolUseBlock) -> ToolResultBlock:
        prepared = kit.prepare(use)
        assert not isinstance(prepared, ToolResultBlock)
        return await kit.execute(*prepared, use, ToolContext(tool_use_id=use.id))

    for i in range(6):
        res = await run(ToolUseBlock(id=f"h{i}", name="hang", input={"n": i}))
        assert res.is_error and "timed out" in res.output_text()

    # at most max_tool_threads running plus max_tool_threads abandoned, all daemon threads
    prefix = kit.thread_pool.name + "-"
    ours = [t for t in threading.enumerate() if t.name.startswith(prefix)]
    assert 2 <= len(ours) <= 4
    assert all(t.daemon for t in ours)
    release.set()  # the hung calls return; their threads rejoin the pool
    res = await run(ToolUseBlock(id="q", name="quick", input={}))
    assert res.state == "success" and res.output_text() == "ok"


async def test_timeout_per_tool_overrides_the_toolkit_default() -> None:
    @function_tool(timeout=0.1)
    async def slow() -> str:
        """Sleeps for an hour."""
        await asyncio.sleep(3600)
        return "never"

    class SlowClassTool(ToolBase):
        name = "slow_class"
        description = "Sleeps."
        timeout = 0.1

        class Input(BaseModel):
            pass

        async def call(self, tool_input: Any, ctx: ToolContext) -> ToolResult:
            await asyncio.sleep(3600)
            return ToolResult(output="never")

    model = ScriptedChatModel([[tool_call("slow"), tool_call("slow_class")], "gave up"])
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(tools=[slow, SlowClassTool()], timeout=None),
    )
    await _reply(agent, "go")
    first, second = _results(model, 1)
    assert first.is_error and "slow timed out after 0.1 seconds" in first.output_text()
    assert second.is_error and "slow_class timed out after 0.1 seconds" in second.output_text()


async def test_a_tool_raising_timeout_error_itself_is_not_reported_as_the_limit() -> None:
    async def fetch() -> str:
        """Its own network call timed out."""
        raise TimeoutError("upstream took too long")

    kit = Toolkit(tools=[fetch], timeout=30)
    use = ToolUseBlock(id="1", name="fetch", input={})
    prepared = kit.prepare(use)
    assert not isinstance(prepared, ToolResultBlock)
    res = await kit.execute(*prepared, use, ToolContext())
    assert res.is_error and res.output_text() == (
        "fetch failed: TimeoutError: upstream took too long"
    )


def test_bad_timeouts_are_user_errors() -> None:
    async def f() -> str:
        """F."""
        return ""

    with pytest.raises(UserError, match="timeout must be a positive"):
        FunctionTool(f, timeout=0)
    with pytest.raises(UserError, match=r"Toolkit\(timeout=...\)"):
        Toolkit(timeout=-1)
    with pytest.raises(UserError, match="max_tool_threads"):
        Toolkit(max_tool_threads=0)
    with pytest.raises(UserError, match="max_output_chars"):
        Toolkit(max_output_chars=10)


# ------------------------------------------------------- item 10: bounded tool output
BIG = 5_000_000


def _big_output() -> str:
    return "HEAD-START " + "x" * BIG + " TAIL-END"


async def test_a_huge_result_is_cut_for_the_model_and_kept_whole_in_storage() -> None:
    def dump() -> str:
        """Returns a huge text."""
        return _big_output()

    memory = InMemoryMemory()
    model = ScriptedChatModel([tool_call("dump"), "ok"])
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        memory=memory,
        toolkit=Toolkit(tools=[dump], max_output_chars=40_000),
    )
    await _reply(agent, "go")
    (sent,) = _results(model, 1)
    text = sent.output_text()
    assert len(text) < 41_000
    assert text.startswith("HEAD-START") and text.endswith("TAIL-END")
    assert f"{len(_big_output()) - 40_000:,} of {len(_big_output()):,} characters" in text
    # what the providers receive holds only the cut text, never the stored full output
    for formatted in (
        str(format_openai_messages(model.calls[1].messages)),
        str(format_anthropic_messages(model.calls[1].messages)),
    ):
        assert len(formatted) < 50_000
    stored = [m for m in await memory.get() if m.tool_results]
    assert len(stored) == 1
    assert stored[0].tool_results[0].output_text() == text
    full = stored[0].metadata[FULL_OUTPUTS_KEY]["0"]
    # the stored full text is bounded too, and keeps both ends
    assert MAX_STORED_OUTPUT_CHARS <= len(full) < MAX_STORED_OUTPUT_CHARS + 1000
    assert full.startswith("HEAD-START") and full.endswith("TAIL-END")


async def test_the_context_budget_shrinks_the_cap() -> None:
    def dump() -> str:
        """Returns a huge text."""
        return _big_output()

    small = ScriptedChatModel([[tool_call("dump"), tool_call("dump")], "ok"])
    agent = Agent(
        name="a",
        system_prompt="s",
        model=small,
        toolkit=Toolkit(tools=[dump]),
        max_context_tokens=8000,
    )
    await _reply(agent, "go")
    results = _results(small, 1)
    assert len(results) == 2
    # both results of the step together stay well inside the 8000-token budget
    total = sum(len(r.output_text()) for r in results)
    assert total < 8000
    assert all("characters of this output were cut" in r.output_text() for r in results)


async def test_small_results_are_untouched() -> None:
    memory = InMemoryMemory()

    def echo(text: str) -> str:
        """Echo."""
        return text

    model = ScriptedChatModel([tool_call("echo", text="short"), "ok"])
    agent = Agent(
        name="a", system_prompt="s", model=model, memory=memory, toolkit=Toolkit(tools=[echo])
    )
    await _reply(agent, "go")
    assert _results(model, 1)[0].output == "short"
    stored = [m for m in await memory.get() if m.tool_results]
    assert FULL_OUTPUTS_KEY not in stored[0].metadata


async def test_lone_surrogates_in_output_do_not_poison_the_session() -> None:
    memory = InMemoryMemory()

    def names() -> str:
        """A file name that is not valid UTF-8."""
        return "bad-\udcff.txt"

    model = ScriptedChatModel([tool_call("names"), "ok"])
    agent = Agent(
        name="a", system_prompt="s", model=model, memory=memory, toolkit=Toolkit(tools=[names])
    )
    await _reply(agent, "go")
    sent = _results(model, 1)[0].output_text()
    assert sent == "bad-\\udcff.txt"
    for m in await memory.get():
        m.model_dump_json()  # every stored message serialises


# ------------------------------------------------------------ item 17: never crash
class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no __str__ for you")

    def __repr__(self) -> str:
        raise RuntimeError("no __repr__ either")


class _Boom(BaseException):
    """A BaseException subclass a careless library might raise."""


class _Unshowable:
    def __str__(self) -> str:
        raise ValueError("cannot show")

    __repr__ = __str__


def test_describe_exception_survives_raising_str_and_repr() -> None:
    assert describe_exception(_UnprintableError()).startswith("_UnprintableError")
    assert describe_exception(ValueError("x" * 10_000)).endswith("chars cut]")


async def test_no_tool_failure_crashes_the_reply() -> None:
    async def unprintable() -> str:
        """Raises an exception that cannot be printed."""
        raise _UnprintableError

    def boom() -> str:
        """Raises a BaseException subclass (in a thread)."""
        raise _Boom("kaboom")

    async def self_cancel() -> str:
        """Raises CancelledError although nobody cancelled it."""
        raise asyncio.CancelledError

    def unshowable() -> Any:
        """Returns a value that cannot be turned into text."""
        return _Unshowable()

    script: list[Any] = [
        [
            tool_call("unprintable"),
            tool_call("boom"),
            tool_call("self_cancel"),
            tool_call("unshowable"),
        ],
        "still here",
    ]
    model = ScriptedChatModel(script)
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(tools=[unprintable, boom, self_cancel, unshowable]),
    )
    reply = await _reply(agent, "go")
    assert reply.get_text_content() == "still here"
    res = _results(model, 1)
    assert all(r.state == "error" for r in res)
    assert res[0].output_text().startswith("unprintable failed: _UnprintableError")
    assert res[1].output_text() == "boom failed: _Boom: kaboom"
    assert res[2].output_text().startswith("self_cancel failed: CancelledError")
    assert "unshowable failed" in res[3].output_text()
    assert "cannot be turned into text" in res[3].output_text()


async def test_system_exit_and_caller_cancellation_still_propagate() -> None:
    async def leave() -> str:
        """Asks the process to exit."""
        raise SystemExit(3)

    async def slow() -> str:
        """Sleeps."""
        await asyncio.sleep(3600)
        return "never"

    kit = Toolkit(tools=[leave, slow])
    use = ToolUseBlock(id="1", name="leave", input={})
    prepared = kit.prepare(use)
    assert not isinstance(prepared, ToolResultBlock)
    with pytest.raises(SystemExit):
        await kit.execute(*prepared, use, ToolContext())
    use = ToolUseBlock(id="2", name="slow", input={})
    prepared = kit.prepare(use)
    assert not isinstance(prepared, ToolResultBlock)
    task = asyncio.create_task(kit.execute(*prepared, use, ToolContext()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_limit_output_cuts_text_blocks_and_keeps_images() -> None:
    image = ImageBlock(source=URLSource(url="https://example.invalid/a.png"))
    block = ToolResultBlock(
        id="1",
        name="shot",
        output=[TextBlock(text="a" * 30_000), image, TextBlock(text="b" * 30_000)],
    )
    kit = Toolkit(max_output_chars=10_000)
    sent, full = kit.limit_output(block)
    assert isinstance(sent.output, list) and sent.output[1] == image
    assert sum(len(b.text) for b in sent.output if isinstance(b, TextBlock)) < 11_000
    assert full is not None and full.count("a") == 30_000 and full.count("b") == 30_000
    # a tighter limit (the agent's, from a context budget) applies, within a floor
    sent, _ = kit.limit_output(ToolResultBlock(id="2", name="x", output="z" * 50_000), 2000)
    assert len(sent.output_text()) < 2500


async def test_an_async_tool_that_swallows_cancellation_cannot_hang_the_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import mnemoscope.tool._toolkit as toolkit_module

    monkeypatch.setattr(toolkit_module, "CANCEL_GRACE_SECONDS", 0.1)
    stop = asyncio.Event()

    async def stubborn() -> str:
        """Catches every cancellation and carries on."""
        while not stop.is_set():
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                continue
        return "finally"

    model = ScriptedChatModel([tool_call("stubborn"), "moved on"])
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(tools=[FunctionTool(stubborn, timeout=0.2)]),
    )
    try:
        reply = await _reply(agent, "go")
        assert reply.get_text_content() == "moved on"
        (res,) = _results(model, 1)
        assert res.is_error and "stubborn timed out after 0.2 seconds" in res.output_text()
    finally:
        stop.set()
        for _ in range(100):  # let the abandoned call end before the loop closes
            if not toolkit_module._abandoned_tasks:
                break
            await asyncio.sleep(0.02)
    assert not toolkit_module._abandoned_tasks


def test_a_hung_sync_tool_does_not_block_interpreter_exit() -> None:
    script = textwrap.dedent(
        """
        import asyncio, threading
        from mnemoscope.agent import Agent
        from mnemoscope.testing import ScriptedChatModel, tool_call
        from mnemoscope.tool import FunctionTool, Toolkit

        def hang() -> str:
            \"\"\"Never returns.\"\"\"
            threading.Event().wait()
            return ""

        async def main() -> None:
            model = ScriptedChatModel([tool_call("hang"), "bye"])
            agent = Agent(name="a", system_prompt="s", model=model,
                          toolkit=Toolkit(tools=[FunctionTool(hang, timeout=0.2)]))
            print((await agent.reply("go")).get_text_content(), flush=True)

        asyncio.run(main())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "bye"
