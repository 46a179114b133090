"""The context policy (issue 11, item 1): one object on the agent, checked at construction."""

from __future__ import annotations

import pytest

from mnemoscope.agent import Agent
from mnemoscope.context import ContextPolicy, ExtractiveSummarizer
from mnemoscope.errors import UserError
from mnemoscope.events import ContextEvent
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import Toolkit, function_tool


def test_defaults_are_documented_values() -> None:
    p = ContextPolicy()
    assert p.window_tokens is None and p.input_tokens is None and not p.compacts
    assert (p.compact_trigger, p.compact_keep, p.tool_results_share) == (0.8, 0.4, 0.25)
    assert p.pin_tokens == 2000 and p.recall_tokens == 0 and p.summarizer is None
    p = ContextPolicy(window_tokens=8000, answer_reserve=1000, summarizer=ExtractiveSummarizer())
    assert p.input_tokens == 7000 and p.compacts


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"window_tokens": 0}, "window_tokens"),
        ({"window_tokens": 100, "answer_reserve": 100}, "answer_reserve"),
        ({"compact_trigger": 1.5}, "compact_trigger"),
        ({"compact_trigger": 0.5, "compact_keep": 0.6}, "compact_keep"),
        ({"recall_tokens": -1}, "recall_tokens"),
        ({"clear_exclude_tools": "Read"}, "clear_exclude_tools"),
    ],
)
def test_bad_policy_names_the_parameter(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(UserError, match=named):
        ContextPolicy(**kwargs)  # type: ignore[arg-type]


def test_max_context_tokens_maps_to_a_policy_and_excludes_one() -> None:
    model = ScriptedChatModel(["ok"])
    agent = Agent("a", "sys", model, max_context_tokens=1234)
    assert agent.context_policy == ContextPolicy(window_tokens=1234)
    assert agent.context_builder.max_tokens == 1234
    with pytest.raises(UserError, match="not both"):
        Agent("a", "sys", model, max_context_tokens=10, context_policy=ContextPolicy())
    with pytest.raises(UserError, match="ContextPolicy"):
        Agent("a", "sys", model, context_policy={"window_tokens": 10})  # type: ignore[arg-type]


async def test_answer_reserve_is_kept_free_in_every_input() -> None:
    model = ScriptedChatModel(default="an answer " * 30)
    policy = ContextPolicy(window_tokens=700, answer_reserve=300)
    agent = Agent("a", "sys", model, context_policy=policy)
    events = []
    for i in range(12):
        async for ev in agent.reply_stream(f"question {i} " + "words " * 40):
            if isinstance(ev, ContextEvent):
                events.append(ev)
    assert events and all(0 < ev.tokens <= 400 for ev in events)
    assert any(ev.dropped for ev in events)


async def test_tool_result_cap_bounds_what_the_model_sees() -> None:
    @function_tool
    def dump() -> str:
        """Dump a lot."""
        return "x" * 20_000

    model = ScriptedChatModel([tool_call("dump"), "done"])
    policy = ContextPolicy(window_tokens=100_000, tool_result_chars=1_000)
    agent = Agent("a", "sys", model, toolkit=Toolkit([dump]), context_policy=policy)
    await agent.reply("go")
    result = model.calls[1].messages[-1].tool_results[0]
    assert 1_000 <= len(result.output_text()) < 1_600  # the cap plus the cut marker


async def test_every_model_call_reports_its_context_even_with_no_budget() -> None:
    @function_tool
    def echo(x: str) -> str:
        """Echo x."""
        return x

    model = ScriptedChatModel([tool_call("echo", x="hi"), "done", "again"])
    agent = Agent("a", "sys", model, toolkit=Toolkit([echo]))
    assert agent.context_policy.window_tokens is None
    first = [e async for e in agent.reply_stream("go") if isinstance(e, ContextEvent)]
    assert [e.iteration for e in first] == [1, 2]  # one per model call
    assert first[1].parts["transcript"] > 0 and first[1].parts["history"] == 0
    second = [e async for e in agent.reply_stream("more") if isinstance(e, ContextEvent)]
    (event,) = second
    stored = await agent.memory.get()
    # the whole first reply is history now: every stored message was kept, none dropped
    assert event.kept == [m.id for m in stored[:-2]] and event.dropped == []  # not "more"+answer
    assert event.tokens == sum(event.parts.values()) and event.parts["history"] > 0
    assert len(model.calls) == 3
