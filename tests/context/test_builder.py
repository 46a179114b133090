from __future__ import annotations

from mnemoscope.context import ContextBuilder, sanitize_history
from mnemoscope.message import AssistantMsg, HintBlock, ToolResultBlock, ToolUseBlock, UserMsg


def _turn(i: int, with_tool: bool = False) -> list:
    user = UserMsg("u", f"question {i} " + "word " * 40)
    if not with_tool:
        return [user, AssistantMsg("a", f"answer {i} " + "word " * 40)]
    use = AssistantMsg("a", [ToolUseBlock(id=f"t{i}", name="echo", input={"x": i})])
    res = UserMsg("tool", [ToolResultBlock(id=f"t{i}", name="echo", output="word " * 40)])
    return [user, use, res, AssistantMsg("a", f"answer {i}")]


def test_no_budget_keeps_everything_in_order() -> None:
    history = _turn(1) + _turn(2, with_tool=True)
    current = UserMsg("u", "now")
    built = ContextBuilder().build(system_prompt="sys", history=history, current=current)
    assert [m.id for m in built.messages[1:]] == [m.id for m in history] + [current.id]
    assert built.dropped == []


def test_budget_drops_oldest_whole_groups_and_tells_the_model() -> None:
    builder = ContextBuilder(max_tokens=400)
    history: list = []
    for i in range(10):
        history += _turn(i, with_tool=i % 2 == 0)
    current = UserMsg("u", "latest question")
    built = builder.build(system_prompt="sys", history=history, current=current)
    assert built.tokens <= 400
    assert built.dropped, "a 400-token budget cannot hold ten turns"
    kept = built.messages[2:-1]
    # a tool use is never kept without its result, nor a result without its use
    use_ids = {b.id for m in kept for b in m.tool_uses}
    result_ids = {b.id for m in kept for b in m.tool_results}
    assert use_ids == result_ids
    # what was kept is the most recent suffix of history
    assert [m.id for m in kept] == [m.id for m in history[-len(kept) :]]
    notice = built.messages[1].content[0]
    assert isinstance(notice, HintBlock)
    assert f"{len(built.dropped)} earlier messages" in notice.hint
    assert built.messages[-1].id == current.id


def test_current_message_and_transcript_are_always_kept() -> None:
    builder = ContextBuilder(max_tokens=10)
    current = UserMsg("u", "word " * 100)
    step = AssistantMsg("a", "thinking " * 50)
    built = builder.build(system_prompt="sys", history=_turn(1), current=current, transcript=[step])
    assert built.messages[-2:] == [current, step]


def test_dangling_tool_use_from_a_crashed_turn_is_removed() -> None:
    use = AssistantMsg(
        "a", [ToolUseBlock(id="lost", name="echo"), ToolUseBlock(id="ok", name="echo")]
    )
    res = UserMsg("tool", [ToolResultBlock(id="ok", name="echo", output="fine")])
    orphan = UserMsg("tool", [ToolResultBlock(id="ghost", name="echo", output="?")])
    clean = sanitize_history([use, res, orphan])
    assert [b.id for b in clean[0].tool_uses] == ["ok"]
    assert len(clean) == 2


def test_no_budget_still_counts_every_part_and_only_new_messages() -> None:
    counted: list[str] = []

    def counter(text: str) -> int:
        counted.append(text)
        return len(text.split())

    builder = ContextBuilder(token_counter=counter)
    history = _turn(1) + _turn(2, with_tool=True)
    current = UserMsg("u", "now what")
    built = builder.build(system_prompt="be brief", history=history, current=current)
    assert built.parts["system"] == 4 + 2 and built.parts["current"] == 4 + 2
    assert built.parts["history"] == sum(builder.msg_tokens(m) for m in history)
    assert built.tokens == sum(built.parts.values()) > 0
    assert (built.parts["pinned"], built.parts["recalled"], built.parts["notice"]) == (0, 0, 0)
    assert built.kept_ids == [m.id for m in history]
    # the next call of the reply counts only its new step, not the history again
    counted.clear()
    step = AssistantMsg("a", "thinking it over")
    again = builder.build(
        system_prompt="be brief", history=history, current=current, transcript=[step]
    )
    assert counted == ["thinking it over"]
    assert again.tokens == built.tokens + 4 + 3
