"""Tool-result offloading (issue 11, item 3): read-back by id and range; old results
cleared to stubs with the pairs intact and an exclude list."""

from __future__ import annotations

from mnemoscope.agent import FULL_OUTPUTS_KEY, Agent
from mnemoscope.context import ContextPolicy, clear_old_results
from mnemoscope.memory import InMemoryMemory
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import ReadToolOutput, Toolkit, function_tool

from .conftest import check_pairs

BIG = "".join(f"line {i:05d}\n" for i in range(3000))  # 33,000 characters


@function_tool(is_read_only=True)
def big_log() -> str:
    """A long log."""
    return BIG


@function_tool(is_read_only=True)
def keep_me() -> str:
    """A result that must stay whole."""
    return "precious " * 60


async def test_cut_output_points_to_read_tool_output_and_reads_back_exact_ranges() -> None:
    memory = InMemoryMemory()
    seen: dict[str, str] = {}

    def respond(call: object) -> object:
        last = call.messages[-1]  # type: ignore[attr-defined]
        if last.name == "user":
            return [tool_call("big_log")]
        result = last.tool_results[0]
        if result.name == "big_log":
            seen["preview"] = result.output_text()
            return [
                tool_call("read_tool_output", message_id=last.id, index=0, offset=12_000, length=24)
            ]
        seen["read"] = result.output_text()
        return "done"

    model = ScriptedChatModel(default=respond)
    agent = Agent(
        "a",
        "sys",
        model,
        toolkit=Toolkit([big_log, ReadToolOutput()]),
        memory=memory,
        context_policy=ContextPolicy(window_tokens=4000),
    )
    await agent.reply("show the log")
    assert (
        "read_tool_output(message_id=" in seen["preview"] and "33,000 characters" in seen["preview"]
    )
    assert len(seen["preview"]) < 6000
    assert seen["read"].endswith(BIG[12_000:12_024])
    assert "characters 12,000-12,024 of 33,000" in seen["read"]
    stored = next(
        m for m in await memory.get(marks="tool_result") if m.tool_results[0].name == "big_log"
    )
    assert stored.metadata[FULL_OUTPUTS_KEY]["0"] == BIG


async def test_read_tool_output_errors_name_the_fix() -> None:
    calls = [tool_call("read_tool_output", message_id="nope"), "ok"]
    model = ScriptedChatModel(calls)
    agent = Agent("a", "sys", model, toolkit=Toolkit([ReadToolOutput()]))
    await agent.reply("x")
    result = model.calls[1].messages[-1].tool_results[0]
    assert result.is_error and "no stored tool-result message has id 'nope'" in result.output_text()


async def test_old_results_become_stubs_pairs_stay_and_excluded_tools_stay_whole() -> None:
    memory = InMemoryMemory()

    def respond(call: object) -> object:
        last = call.messages[-1]  # type: ignore[attr-defined]
        if last.tool_results:
            return "ok"
        return [tool_call("big_log"), tool_call("keep_me")]

    model = ScriptedChatModel(default=respond)
    policy = ContextPolicy(
        window_tokens=60_000, clear_tool_results_after=1, clear_exclude_tools=["keep_me"]
    )
    agent = Agent(
        "a",
        "sys",
        model,
        toolkit=Toolkit([big_log, keep_me, ReadToolOutput()]),
        memory=memory,
        context_policy=policy,
    )
    for i in range(4):
        await agent.reply(f"turn {i}")
    last_input = model.calls[-2].messages  # the first call of the last reply
    check_pairs(last_input)
    results = [m for m in last_input if m.tool_results]
    assert len(results) == 3
    for old in results[:2]:
        big, kept = old.tool_results
        assert big.output_text().startswith("[cleared from the context: ")
        assert f"read_tool_output(message_id={old.id!r}, index=0)" in big.output_text()
        assert kept.output_text() == "precious " * 60
    assert not results[2].tool_results[0].output_text().startswith("[cleared")
    # the stored messages are untouched
    stored = [m for m in await memory.get(marks="tool_result")]
    assert all(not m.tool_results[0].output_text().startswith("[cleared") for m in stored)


def test_clear_old_results_keeps_ids_names_and_states() -> None:
    from mnemoscope.message import AssistantMsg, ToolResultBlock, UserMsg

    history = []
    for i in range(3):
        use = tool_call("t", _id=f"c{i}")
        history += [
            AssistantMsg("a", [use]),
            UserMsg(
                "tool", [ToolResultBlock(id=f"c{i}", name="t", output="y" * 500, state="error")]
            ),
        ]
    out, stubbed = clear_old_results(history, 1)
    assert stubbed == [history[1].id, history[3].id]
    for before, after in zip(history, out, strict=True):
        assert before.id == after.id
        for b, a in zip(before.tool_results, after.tool_results, strict=True):
            assert (a.id, a.name, a.state) == (b.id, b.name, b.state)
    check_pairs(out)
