"""The Anthropic formatter is pure: these tests need no network."""

from __future__ import annotations

from typing import Any

from mnemoscope.message import (
    AssistantMsg,
    Base64Source,
    HintBlock,
    ImageBlock,
    SystemMsg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    URLSource,
    UserMsg,
)
from mnemoscope.model import RAW_ARGUMENTS_KEY
from mnemoscope.model._anthropic_formatter import (
    AnthropicStreamAccumulator,
    format_anthropic_messages,
    format_anthropic_tool_choice,
    format_anthropic_tools,
    parse_anthropic_response,
)


def test_system_goes_to_the_system_parameter() -> None:
    system, turns = format_anthropic_messages(
        [SystemMsg("Be brief."), SystemMsg("Answer in French."), UserMsg("a", "hi")]
    )
    assert system == "Be brief.\n\nAnswer in French."
    assert turns == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_no_system_gives_none() -> None:
    system, _ = format_anthropic_messages([UserMsg("a", "hi")])
    assert system is None


def test_tool_use_and_result_blocks() -> None:
    _, turns = format_anthropic_messages(
        [
            UserMsg("a", "weather?"),
            AssistantMsg(
                "bot",
                [
                    ThinkingBlock(thinking="secret reasoning"),
                    TextBlock(text="Checking."),
                    ToolUseBlock(id="t1", name="weather", input={"city": "Paris"}),
                ],
            ),
            UserMsg(
                "tools",
                [
                    ToolResultBlock(id="t1", name="weather", output="sunny"),
                ],
            ),
            UserMsg("a", "thanks"),
        ]
    )
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
    ]
    # consecutive user turns merged, tool result first
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
        {"type": "text", "text": "thanks"},
    ]
    assert "secret reasoning" not in str(turns)


def test_error_results_and_images() -> None:
    _, turns = format_anthropic_messages(
        [
            AssistantMsg("bot", [ToolUseBlock(id="t1", name="shot", input={})]),
            UserMsg(
                "tools",
                [
                    ToolResultBlock(
                        id="t1",
                        name="shot",
                        state="error",
                        output=[
                            TextBlock(text="partial"),
                            ImageBlock(source=Base64Source(media_type="image/png", data="AAA")),
                        ],
                    )
                ],
            ),
        ]
    )
    result = turns[1]["content"][0]
    assert result["is_error"] is True
    assert result["content"] == [
        {"type": "text", "text": "partial"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}},
    ]


def test_user_image_by_url_and_hints() -> None:
    _, turns = format_anthropic_messages(
        [
            UserMsg(
                "a",
                [
                    HintBlock(hint="likes cats", source="mem0"),
                    ImageBlock(source=URLSource(url="https://x/cat.png")),
                    TextBlock(text="what is it?"),
                ],
            )
        ]
    )
    content = turns[0]["content"]
    assert content[0]["text"].startswith('<system-hint source="mem0">')
    assert content[1] == {"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}}


def test_assistant_hint_goes_to_the_next_user_turn_after_results() -> None:
    _, turns = format_anthropic_messages(
        [
            AssistantMsg(
                "bot",
                [ToolUseBlock(id="t1", name="f", input={}), HintBlock(hint="memo", source="m")],
            ),
            UserMsg("tools", [ToolResultBlock(id="t1", name="f", output="ok")]),
        ]
    )
    assert [t["role"] for t in turns] == ["assistant", "user"]
    kinds = [b["type"] for b in turns[1]["content"]]
    assert kinds == ["tool_result", "text"]  # the result still opens the user turn
    assert "memo" in turns[1]["content"][1]["text"]


def test_raw_arguments_are_not_sent_as_input() -> None:
    _, turns = format_anthropic_messages(
        [AssistantMsg("bot", [ToolUseBlock(id="t1", name="f", input={RAW_ARGUMENTS_KEY: "{x"})])]
    )
    assert turns[0]["content"][0]["input"] == {}


def test_tools_and_tool_choice() -> None:
    schema = {"type": "object", "properties": {}}
    assert format_anthropic_tools([{"name": "f", "description": "F.", "input_schema": schema}]) == [
        {"name": "f", "description": "F.", "input_schema": schema}
    ]
    assert format_anthropic_tool_choice(None) is None
    assert format_anthropic_tool_choice("auto") == {"type": "auto"}
    assert format_anthropic_tool_choice("required") == {"type": "any"}
    assert format_anthropic_tool_choice("none") == {"type": "none"}
    assert format_anthropic_tool_choice("f") == {"type": "tool", "name": "f"}


def test_parse_response() -> None:
    resp = parse_anthropic_response(
        {
            "id": "msg_1",
            "model": "claude",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "redacted_thinking", "data": "xx"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 5},
        }
    )
    assert resp.thinking == "hmm"
    assert resp.text == "Let me check."
    assert [(u.id, u.name, u.input) for u in resp.tool_uses] == [("t1", "f", {"a": 1})]
    assert resp.stop_reason == "tool_use"
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (15, 4)


def test_stream_accumulator() -> None:
    acc = AnthropicStreamAccumulator()
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_2",
                "model": "c",
                "usage": {"input_tokens": 9, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "a"},
        },
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hel"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "lo"}},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"q": '},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '"x"}'},
        },
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 12},
        },
        {"type": "message_stop"},
    ]
    deltas = [d for e in events for d in acc.feed(e)]
    final = acc.finish()
    assert "".join(d.delta for d in deltas if d.kind == "text") == final.text == "Hello"
    assert final.thinking == "a"
    assert [(u.id, u.input) for u in final.tool_uses] == [("t1", {"q": "x"})]
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (9, 12)
    assert final.stop_reason == "tool_use" and final.id == "msg_2"
