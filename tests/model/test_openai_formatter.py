"""The OpenAI formatter is pure: these tests need no network."""

from __future__ import annotations

import json

import pytest

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
)
from mnemoscope.model import RAW_ARGUMENTS_KEY
from mnemoscope.model._openai_formatter import (
    OpenAIStreamAccumulator,
    format_openai_messages,
    format_openai_tool_choice,
    format_openai_tools,
    parse_openai_response,
)


def test_system_user_assistant_text() -> None:
    out = format_openai_messages(
        [SystemMsg("Be brief."), UserMsg("alice", "hi"), AssistantMsg("bot", "hello")]
    )
    assert out == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]


def test_images_become_content_parts() -> None:
    msg = UserMsg(
        "alice",
        [
            TextBlock(text="what is this?"),
            ImageBlock(source=URLSource(url="https://example.com/cat.png")),
            ImageBlock(source=Base64Source(media_type="image/png", data="iVBORw0KGgo=")),
        ],
    )
    [out] = format_openai_messages([msg])
    assert out["role"] == "user"
    assert out["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]


def _tool_turn() -> list[Msg]:
    return [
        UserMsg("alice", "weather in Paris and Rome?"),
        AssistantMsg(
            "bot",
            [
                ThinkingBlock(thinking="I should call the tool twice"),
                TextBlock(text="Checking."),
                ToolUseBlock(id="c1", name="weather", input={"city": "Paris"}),
                ToolUseBlock(id="c2", name="weather", input={"city": "Rome"}),
            ],
        ),
        UserMsg(
            "tools",
            [
                ToolResultBlock(id="c1", name="weather", output="sunny"),
                ToolResultBlock(id="c2", name="weather", output="boom", state="error"),
            ],
        ),
    ]


def test_tool_calls_and_results() -> None:
    out = format_openai_messages(_tool_turn())
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool"]
    assistant = out[1]
    assert assistant["content"] == "Checking."
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert assistant["tool_calls"][0]["type"] == "function"
    assert assistant["tool_calls"][0]["function"]["name"] == "weather"
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {"city": "Rome"}
    assert out[2] == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    assert out[3]["tool_call_id"] == "c2"
    assert out[3]["content"].startswith("[tool error]") and "boom" in out[3]["content"]


def test_thinking_is_dropped_from_input() -> None:
    out = format_openai_messages(_tool_turn())
    assert "I should call the tool" not in json.dumps(out)


def test_results_in_the_assistant_message_follow_its_calls() -> None:
    # AgentScope-1 style: call and result in one message
    msg = AssistantMsg(
        "bot",
        [
            ToolUseBlock(id="c1", name="ls", input={}),
            ToolResultBlock(id="c1", name="ls", output=""),
        ],
    )
    out = format_openai_messages([msg])
    assert out[0]["role"] == "assistant" and out[0]["content"] is None
    assert out[0]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert out[1] == {"role": "tool", "tool_call_id": "c1", "content": "(no output)"}


def test_user_hint_is_tagged_text() -> None:
    msg = UserMsg(
        "alice",
        [HintBlock(hint="User prefers dark mode.", source="mem0"), TextBlock(text="plot it")],
    )
    [out] = format_openai_messages([msg])
    assert out["role"] == "user"
    assert out["content"].startswith('<system-hint source="mem0">\nUser prefers dark mode.')
    assert "</system-hint>" in out["content"] and out["content"].endswith("plot it")


def test_hint_never_splits_a_tool_call_from_its_result() -> None:
    msgs = [
        AssistantMsg(
            "bot",
            [
                ToolUseBlock(id="c1", name="read", input={"path": "a"}),
                HintBlock(hint="memory: a is old", source="agentic_memory"),
            ],
        ),
        UserMsg("tools", [ToolResultBlock(id="c1", name="read", output="A")]),
    ]
    out = format_openai_messages(msgs)
    assert [m["role"] for m in out] == ["assistant", "tool", "user"]
    assert "memory: a is old" in out[2]["content"]
    assert 'source="agentic_memory"' in out[2]["content"]


def test_hint_in_a_system_message_stays_in_it() -> None:
    out = format_openai_messages(
        [
            SystemMsg([TextBlock(text="Be brief."), HintBlock(hint="MEMORY.md index")]),
            UserMsg("a", "hi"),
        ]
    )
    assert [m["role"] for m in out] == ["system", "user"]
    assert out[0]["content"] == "Be brief.\n\n<system-hint>\nMEMORY.md index\n</system-hint>"


def test_hint_in_a_plain_assistant_message_becomes_user_text() -> None:
    out = format_openai_messages([AssistantMsg("memory", [HintBlock(hint="likes tea")])])
    assert out == [{"role": "user", "content": "<system-hint>\nlikes tea\n</system-hint>"}]


def test_images_in_tool_results_follow_as_user_content() -> None:
    msgs = [
        AssistantMsg("bot", [ToolUseBlock(id="c1", name="shot", input={})]),
        UserMsg(
            "tools",
            [
                ToolResultBlock(
                    id="c1",
                    name="shot",
                    output=[
                        TextBlock(text="screenshot taken"),
                        ImageBlock(source=URLSource(url="https://x/y.png")),
                    ],
                )
            ],
        ),
    ]
    out = format_openai_messages(msgs)
    assert [m["role"] for m in out] == ["assistant", "tool", "user"]
    assert out[1]["content"] == "screenshot taken"
    assert out[2]["content"][1] == {"type": "image_url", "image_url": {"url": "https://x/y.png"}}


def test_raw_arguments_are_sent_back_verbatim() -> None:
    msg = AssistantMsg(
        "bot", [ToolUseBlock(id="c1", name="f", input={RAW_ARGUMENTS_KEY: "{not json"})]
    )
    [out] = format_openai_messages([msg])
    assert out["tool_calls"][0]["function"]["arguments"] == "{not json"


def test_tools_and_tool_choice() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tools = format_openai_tools(
        [{"name": "search", "description": "Search.", "input_schema": schema}]
    )
    assert tools == [
        {
            "type": "function",
            "function": {"name": "search", "description": "Search.", "parameters": schema},
        }
    ]
    assert format_openai_tool_choice(None) is None
    for choice in ("auto", "none", "required"):
        assert format_openai_tool_choice(choice) == choice
    assert format_openai_tool_choice("search") == {
        "type": "function",
        "function": {"name": "search"},
    }


def _completion(message: dict, **extra: object) -> dict:
    return {
        "id": "chatcmpl-9",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        **extra,
    }


def test_parse_text_reasoning_and_usage() -> None:
    resp = parse_openai_response(
        _completion(
            {"role": "assistant", "content": "42", "reasoning_content": "6*7"},
            usage={"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        )
    )
    assert resp.text == "42"
    assert resp.thinking == "6*7"
    assert isinstance(resp.content[0], ThinkingBlock)  # reasoning comes first
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (11, 3)
    assert resp.stop_reason == "stop"
    assert resp.id == "chatcmpl-9"


def test_parse_reasoning_field_used_by_ollama() -> None:
    resp = parse_openai_response(_completion({"content": "ok", "reasoning": "hmm"}))
    assert resp.thinking == "hmm"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"city": "Paris"}', {"city": "Paris"}),
        ("", {}),
        (None, {}),
        ('{"city": ', {RAW_ARGUMENTS_KEY: '{"city": '}),
        ("[1, 2]", {RAW_ARGUMENTS_KEY: "[1, 2]"}),
    ],
)
def test_parse_tool_call_arguments(arguments: str | None, expected: dict) -> None:
    resp = parse_openai_response(
        _completion(
            {
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": arguments},
                    }
                ],
            }
        )
    )
    [use] = resp.tool_uses
    assert (use.id, use.name, use.input) == ("c1", "weather", expected)
    assert resp.text == ""


def test_parse_without_choices_is_an_error() -> None:
    with pytest.raises(ValueError, match="no choices"):
        parse_openai_response({"id": "x", "choices": []})


def test_stream_accumulator_joins_fragments() -> None:
    acc = OpenAIStreamAccumulator()

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {
            "id": "s1",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    deltas = []
    for c in [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "let me "}),
        chunk({"reasoning_content": "see"}),
        chunk({"content": "Sure"}),
        chunk({"content": ", calling."}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]}),
        chunk(
            {"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "g", "arguments": "{}"}}]}
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk({}, "tool_calls"),
        {"id": "s1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}},
    ]:
        deltas.extend(acc.feed(c))
    final = acc.finish()
    assert "".join(d.delta for d in deltas if d.kind == "text") == final.text == "Sure, calling."
    assert (
        "".join(d.delta for d in deltas if d.kind == "thinking") == final.thinking == "let me see"
    )
    assert [(u.id, u.name, u.input) for u in final.tool_uses] == [
        ("c1", "f", {"a": 1}),
        ("c2", "g", {}),
    ]
    assert final.stop_reason == "tool_calls"
    assert final.usage is not None and final.usage.output_tokens == 7


def test_a_stream_and_the_same_reply_unstreamed_give_the_same_response() -> None:
    # the accumulator folds the stream into a reply body and parses it as one
    message = {
        "reasoning_content": "hmm",
        "content": "Hi",
        "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    body = {
        "id": "r1",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    acc = OpenAIStreamAccumulator()
    for delta in (
        {"reasoning_content": "hmm"},
        {"content": "H"},
        {"content": "i"},
        {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a"'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
    ):
        acc.feed({"id": "r1", "model": "m", "choices": [{"index": 0, "delta": delta}]})
    acc.feed({"id": "r1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    acc.feed({"id": "r1", "choices": [], "usage": body["usage"]})
    assert acc.finish() == parse_openai_response(body)
