"""``assert_tool_pairs`` catches the two ways a model input breaks tool pairing."""

from __future__ import annotations

import pytest

from mnemoscope.message import AssistantMsg, ToolResultBlock, ToolUseBlock, UserMsg
from mnemoscope.testing import assert_tool_pairs


def _use(id_: str) -> ToolUseBlock:
    return ToolUseBlock(id=id_, name="echo", input={})


def _result(id_: str) -> ToolResultBlock:
    return ToolResultBlock(id=id_, name="echo", output="ok")


def test_paired_calls_and_results_pass() -> None:
    assert_tool_pairs(
        [
            UserMsg("user", "hi"),
            AssistantMsg("assistant", [_use("a"), _use("b")]),
            UserMsg("tool", [_result("a"), _result("b")]),
            AssistantMsg("assistant", "done"),
        ]
    )


def test_a_result_without_its_call_is_named() -> None:
    with pytest.raises(AssertionError, match="orphan"):
        assert_tool_pairs([UserMsg("user", "hi"), UserMsg("tool", [_result("x")])])


def test_a_call_without_its_result_is_named() -> None:
    with pytest.raises(AssertionError, match="without result"):
        assert_tool_pairs(
            [UserMsg("user", "hi"), AssistantMsg("assistant", [_use("a")]), UserMsg("user", "?")]
        )
