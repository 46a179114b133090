"""The JSON of every block and of a ``Msg``, byte for byte.

Storage backends keep exactly ``Msg.model_dump_json()``; a change in field order or in a
default would make stored messages differ from new ones, so these strings are frozen.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, TypeAdapter

from mnemoscope import message as m

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

BLOCKS: list[tuple[BaseModel, str]] = [
    (m.TextBlock(text="hi"), '{"type":"text","text":"hi"}'),
    (m.ThinkingBlock(thinking="hmm"), '{"type":"thinking","thinking":"hmm"}'),
    (
        m.ToolUseBlock(id="c1", name="Read", input={"path": "a.md"}),
        '{"type":"tool_use","id":"c1","name":"Read","input":{"path":"a.md"}}',
    ),
    (
        m.ToolResultBlock(
            id="c1",
            name="Read",
            output=[m.TextBlock(text="x"), m.ImageBlock(source=m.URLSource(url="http://x/a.png"))],
            state="error",
            metadata={"v": 1},
        ),
        '{"type":"tool_result","id":"c1","name":"Read","output":[{"type":"text","text":"x"},'
        '{"type":"image","source":{"type":"url","url":"http://x/a.png"}}],"state":"error",'
        '"metadata":{"v":1}}',
    ),
    (
        m.ToolResultBlock(id="c2", name="Grep"),
        '{"type":"tool_result","id":"c2","name":"Grep","output":"","state":"success",'
        '"metadata":{}}',
    ),
    (
        m.HintBlock(hint="remember", source="mem0"),
        '{"type":"hint","hint":"remember","source":"mem0"}',
    ),
    (m.HintBlock(hint="h"), '{"type":"hint","hint":"h","source":null}'),
    (
        m.ImageBlock(source=m.Base64Source(media_type="image/png", data="AAAA")),
        '{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}',
    ),
]


@pytest.mark.parametrize(("block", "expected"), BLOCKS, ids=lambda v: type(v).__name__)
def test_block_json_is_frozen(block: BaseModel, expected: str) -> None:
    assert block.model_dump_json() == expected
    assert TypeAdapter(m.ContentBlock).validate_json(expected) == block


def test_msg_json_is_frozen() -> None:
    msg = m.Msg(
        id="m1",
        name="alice",
        role="assistant",
        content=[block for block, _ in BLOCKS],
        metadata={"k": "v"},
        timestamp=AT,
    )
    expected = (
        '{"id":"m1","name":"alice","role":"assistant","content":['
        + ",".join(text for _, text in BLOCKS)
        + '],"metadata":{"k":"v"},"timestamp":"2026-01-02T03:04:05Z","version":1}'
    )
    assert msg.model_dump_json() == expected
    assert m.Msg.model_validate_json(expected) == msg
