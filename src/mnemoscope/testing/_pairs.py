"""A validator for model inputs: tool calls and results paired as providers require.

Example::

    from mnemoscope.testing import assert_tool_pairs

    for call in model.calls:          # a ScriptedChatModel's recorded inputs
        assert_tool_pairs(call.messages)

It checks what actually goes on the wire, through the OpenAI and the Anthropic formatters:
every tool result answers a call of the assistant turn right before it, and every call is
answered before the next turn. A provider rejects an input that breaks either rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from mnemoscope.message import Msg
from mnemoscope.model import format_anthropic_messages, format_openai_messages


def assert_tool_pairs(messages: Sequence[Msg]) -> None:
    """Raise ``AssertionError`` naming the first orphan call or result of ``messages``."""
    _assert_openai_pairs(list(messages))
    _assert_anthropic_pairs(list(messages))


def _assert_openai_pairs(messages: list[Msg]) -> None:
    open_ids: list[str] = []
    for m in format_openai_messages(messages):
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, f"orphan tool message {m}"
            open_ids.remove(m["tool_call_id"])
            continue
        assert not open_ids, f"calls without results: {open_ids}"
        open_ids = [c["id"] for c in m.get("tool_calls") or []]
    assert not open_ids, f"calls without results: {open_ids}"


def _assert_anthropic_pairs(messages: list[Msg]) -> None:
    _, turns = format_anthropic_messages(messages)
    open_ids: list[str] = []
    for turn in turns:
        blocks = turn["content"] if isinstance(turn["content"], list) else []
        if turn["role"] == "user":
            for rid in [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]:
                assert rid in open_ids, f"orphan tool_result {rid}"
                open_ids.remove(rid)
            assert not open_ids, f"tool_use without result: {open_ids}"
        else:
            assert not open_ids, f"tool_use without result: {open_ids}"
            open_ids = [b["id"] for b in blocks if b.get("type") == "tool_use"]
    assert not open_ids, f"tool_use without result: {open_ids}"
