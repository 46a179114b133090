from __future__ import annotations

import json

import pytest

from mnemoscope.errors import ValidationError
from mnemoscope.message import (
    AssistantMsg,
    Base64Source,
    HintBlock,
    ImageBlock,
    Msg,
    SystemMsg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    URLSource,
    UserMsg,
    as_msg,
)


def _all_blocks_msg() -> Msg:
    return AssistantMsg(
        "assistant",
        [
            TextBlock(text="hello 你好"),
            ThinkingBlock(thinking="let me think"),
            ToolUseBlock(id="c1", name="Read", input={"file_path": "/a", "nested": {"x": [1, 2]}}),
            ToolResultBlock(
                id="c1", name="Read", output=[TextBlock(text="1\tline")], state="error"
            ),
            HintBlock(hint="remember", source="agentic_memory"),
            ImageBlock(source=URLSource(url="https://example.invalid/a.png")),
            ImageBlock(source=Base64Source(media_type="image/png", data="AAAA")),
        ],
        metadata={"k": [1, {"v": None}]},
    )


def test_json_round_trip_is_lossless() -> None:
    msg = _all_blocks_msg()
    again = Msg.from_json(msg.to_json())
    assert again == msg
    assert again.content[1] == ThinkingBlock(thinking="let me think")
    assert isinstance(again.content[5], ImageBlock)
    assert again.timestamp == msg.timestamp


def test_string_content_becomes_text_block() -> None:
    msg = UserMsg("alice", "Remember that I prefer dark-mode charts.")
    assert msg.role == "user" and msg.name == "alice"
    assert msg.content == [TextBlock(text="Remember that I prefer dark-mode charts.")]
    assert msg.get_text_content() == "Remember that I prefer dark-mode charts."


def test_helpers_set_roles() -> None:
    assert AssistantMsg("memory", "x").role == "assistant"
    assert SystemMsg("be brief").role == "system"
    assert as_msg("hi").role == "user"
    with pytest.raises(ValidationError, match="expected a Msg or a str"):
        as_msg(42)  # type: ignore[arg-type]


def test_tool_result_error_states() -> None:
    assert ToolResultBlock(id="1", name="t", state="denied").is_error
    assert not ToolResultBlock(id="1", name="t", output="ok").is_error


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ("{not json", "Invalid JSON"),
        (json.dumps({"name": "a", "role": "robot", "content": []}), "role"),
        (json.dumps({"name": "a", "role": "user", "content": [{"type": "video"}]}), "content.0"),
        (json.dumps({"role": "user"}), "name"),
    ],
)
def test_malformed_json_raises_clear_validation_error(doc: str, fragment: str) -> None:
    with pytest.raises(ValidationError, match="not a valid Msg JSON document") as info:
        Msg.from_json(doc)
    assert fragment in str(info.value)


def test_block_accessors() -> None:
    msg = _all_blocks_msg()
    assert [b.id for b in msg.tool_uses] == ["c1"]
    assert msg.tool_results[0].output_text() == "1\tline"
    assert msg.hints[0].source == "agentic_memory"
    assert msg.thinking == "let me think"
