"""Hardening of the context builder (issue 10, items 10 and 16).

* 10: huge texts are never tokenised (that blocked the loop for seconds): above a size
  they are estimated from their length;
* 16: tool uses and results pair by position within their step, not only by id, so a
  history window cut in the middle of a turn never sends an orphan result, even when the
  provider reuses ids such as ``call_0``.
"""

from __future__ import annotations

from mnemoscope.context import ContextBuilder, sanitize_history
from mnemoscope.message import AssistantMsg, TextBlock, ToolResultBlock, ToolUseBlock, UserMsg
from mnemoscope.model import count_tokens, estimate_tokens
from mnemoscope.model._tokens import HUGE_TEXT_CHARS
from mnemoscope.testing import assert_tool_pairs


def _use(id_: str, name: str = "echo") -> ToolUseBlock:
    return ToolUseBlock(id=id_, name=name, input={})


def _res(id_: str, output: str = "out") -> ToolResultBlock:
    return ToolResultBlock(id=id_, name="echo", output=output)


# ------------------------------------------------------------------------ item 16
def test_a_result_pairs_only_with_the_step_right_before_it() -> None:
    history = [
        UserMsg("tool", [_res("call_0", "orphan of a cut-off step")]),
        AssistantMsg("a", "answer"),
        UserMsg("u", "again"),
        AssistantMsg("a", [_use("call_0")]),
        UserMsg("tool", [_res("call_0", "kept")]),
    ]
    clean = sanitize_history(history)
    assert [b.output_text() for m in clean for b in m.tool_results] == ["kept"]
    assert len(clean) == 4


def test_reused_ids_within_one_step_pair_in_order_and_extras_are_dropped() -> None:
    history = [
        AssistantMsg("a", [_use("call_0"), _use("call_0"), _use("call_0")]),
        UserMsg("tool", [_res("call_0", "1"), _res("call_0", "2")]),
        UserMsg("u", "next"),
        AssistantMsg("a", [_use("x")]),
        UserMsg("u", "interrupted before the result"),
        UserMsg("tool", [_res("x", "late result after another message")]),
    ]
    clean = sanitize_history(history)
    assert len(clean[0].tool_uses) == 2
    assert [b.output_text() for b in clean[1].tool_results] == ["1", "2"]
    assert not any(m.tool_uses for m in clean[2:])
    assert not any(m.tool_results for m in clean[2:])
    builder = ContextBuilder(max_tokens=10_000)
    built = builder.build(system_prompt="s", history=history, current=UserMsg("u", "now"))
    assert_tool_pairs(built.messages)


def test_a_trailing_step_without_results_is_dropped() -> None:
    history = [UserMsg("u", "q"), AssistantMsg("a", [TextBlock(text="calling"), _use("call_0")])]
    clean = sanitize_history(history)
    assert len(clean) == 2 and not clean[1].tool_uses
    assert clean[1].get_text_content() == "calling"


# ------------------------------------------------------------------------ item 10
def test_huge_texts_are_never_tokenised() -> None:
    seen: list[int] = []

    def counter(text: str) -> int:
        seen.append(len(text))
        return len(text) // 4

    huge = "y" * 3_000_000
    history = [
        AssistantMsg("a", [_use("c1")]),
        UserMsg("tool", [ToolResultBlock(id="c1", name="echo", output=huge)]),
        AssistantMsg("a", "ok"),
    ]
    builder = ContextBuilder(max_tokens=8000, token_counter=counter)
    built = builder.build(system_prompt="sys", history=history, current=UserMsg("u", "hi"))
    assert seen and max(seen) <= HUGE_TEXT_CHARS
    # the huge result is costed (not ignored): its group does not fit, the rest does
    assert [m.id for m in built.dropped] == [history[0].id, history[1].id]
    assert history[2] in built.messages
    seen.clear()
    builder.build(system_prompt="p" * (HUGE_TEXT_CHARS + 1), history=[], current=UserMsg("u", "x"))
    assert max(seen) <= HUGE_TEXT_CHARS


def test_token_functions_estimate_huge_texts_from_their_size() -> None:
    huge = "word " * 1_000_000
    assert estimate_tokens(huge) == count_tokens(huge) == len(huge) // 2
    cjk = "汉" * (HUGE_TEXT_CHARS + 1)
    # 1.5 tokens a CJK character, like the character-by-character estimate
    assert estimate_tokens(cjk) == count_tokens(cjk) == (3 * len(cjk) + 1) // 2
    small = "汉" * 10
    assert estimate_tokens(small) == 15
