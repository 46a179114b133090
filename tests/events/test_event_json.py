"""The JSON of every agent event, byte for byte (the HTTP service streams it as is)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, TypeAdapter

from mnemoscope import events as ev
from mnemoscope.message import HintBlock, Msg, ToolResultBlock, ToolUseBlock

USER = Msg(
    id="u1",
    name="alice",
    role="user",
    content="hello",
    timestamp=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
)
USER_JSON = (
    '{"id":"u1","name":"alice","role":"user","content":[{"type":"text","text":"hello"}],'
    '"metadata":{},"timestamp":"2026-01-02T03:04:05Z","version":1}'
)

EVENTS: list[tuple[BaseModel, str]] = [
    (
        ev.ReplyStartEvent(reply_id="r", input=USER),
        '{"reply_id":"r","type":"reply_start","input":' + USER_JSON + "}",
    ),
    (
        ev.ReasoningStartEvent(reply_id="r", iteration=1),
        '{"reply_id":"r","type":"reasoning_start","iteration":1}',
    ),
    (
        ev.TextDeltaEvent(reply_id="r", delta="a"),
        '{"reply_id":"r","type":"text_delta","delta":"a"}',
    ),
    (ev.ThinkingDeltaEvent(delta="b"), '{"reply_id":"","type":"thinking_delta","delta":"b"}'),
    (
        ev.ToolUseEvent(tool_use=ToolUseBlock(id="c1", name="Read", input={"path": "a.md"})),
        '{"reply_id":"","type":"tool_use","tool_use":{"type":"tool_use","id":"c1",'
        '"name":"Read","input":{"path":"a.md"}}}',
    ),
    (
        ev.PermissionEvent(
            tool_use_id="c1", tool_name="Read", behavior="ask", approved=True, message="ok"
        ),
        '{"reply_id":"","type":"permission","tool_use_id":"c1","tool_name":"Read",'
        '"behavior":"ask","approved":true,"message":"ok"}',
    ),
    (
        ev.PermissionEvent(tool_use_id="c1", tool_name="Read", behavior="deny"),
        '{"reply_id":"","type":"permission","tool_use_id":"c1","tool_name":"Read",'
        '"behavior":"deny","approved":null,"message":""}',
    ),
    (
        ev.ToolResultEvent(result=ToolResultBlock(id="c2", name="Grep")),
        '{"reply_id":"","type":"tool_result","result":{"type":"tool_result","id":"c2",'
        '"name":"Grep","output":"","state":"success","metadata":{}}}',
    ),
    (
        ev.HintInjectedEvent(hint=HintBlock(hint="remember", source="mem0")),
        '{"reply_id":"","type":"hint_injected","hint":{"type":"hint","hint":"remember",'
        '"source":"mem0"}}',
    ),
    (
        ev.MemoryEvent(source="mem0", action="retrieve", message="m", data={"n": 2}),
        '{"reply_id":"","type":"memory","source":"mem0","action":"retrieve","message":"m",'
        '"data":{"n":2}}',
    ),
    (
        ev.ContextEvent(
            iteration=2,
            tokens=10,
            parts={"system": 3},
            kept=["u1"],
            dropped=["x"],
            compacted=["y"],
            offloaded=["z"],
            recalled=["w"],
            pinned=["p"],
            summary_id="s",
            prefix_changes=1,
        ),
        '{"reply_id":"","type":"context","iteration":2,"tokens":10,"parts":{"system":3},'
        '"kept":["u1"],"dropped":["x"],"compacted":["y"],"offloaded":["z"],"recalled":["w"],'
        '"pinned":["p"],"summary_id":"s","prefix_changes":1}',
    ),
    (
        ev.ContextEvent(),
        '{"reply_id":"","type":"context","iteration":0,"tokens":0,"parts":{},"kept":[],'
        '"dropped":[],"compacted":[],"offloaded":[],"recalled":[],"pinned":[],'
        '"summary_id":null,"prefix_changes":0}',
    ),
    (
        ev.CompactionEvent(status="done", summary_id="s", covered=["a"], background=True),
        '{"reply_id":"","type":"compaction","status":"done","summary_id":"s","covered":["a"],'
        '"error":"","background":true}',
    ),
    (
        ev.ReplyEndEvent(reply_id="r", msg=USER, exit_reason="max_iters"),
        '{"reply_id":"r","type":"reply_end","msg":' + USER_JSON + ',"exit_reason":"max_iters"}',
    ),
]


@pytest.mark.parametrize(("event", "expected"), EVENTS, ids=lambda v: type(v).__name__)
def test_event_json_is_frozen(event: BaseModel, expected: str) -> None:
    assert event.model_dump_json() == expected
    assert TypeAdapter(ev.AgentEvent).validate_json(expected) == event


def test_an_event_rejects_an_unknown_field() -> None:
    with pytest.raises(ValueError, match="extra"):
        ev.TextDeltaEvent(delta="a", colour="red")  # type: ignore[call-arg]
