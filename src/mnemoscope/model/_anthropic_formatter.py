"""Pure conversion between mnemoscope messages and the Anthropic Messages API format.

Example::

    from mnemoscope.message import SystemMsg, UserMsg
    from mnemoscope.model._anthropic_formatter import format_anthropic_messages

    system, messages = format_anthropic_messages([SystemMsg("Be brief."), UserMsg("a", "hi")])
    # system == "Be brief."; messages == [{"role": "user", "content": [{"type": "text", ...}]}]

Rules: system messages go to the ``system`` parameter; tool uses are ``tool_use`` blocks in
the assistant turn and results are ``tool_result`` blocks opening the next user turn;
consecutive turns of the same role are merged (the API wants alternation); thinking blocks
are dropped from the input (the API needs their signatures, which are not kept); hints are
user text wrapped (and their delimiters neutralised) by the OpenAI formatter's
:func:`~mnemoscope.model._openai_formatter.format_hint`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mnemoscope.message import (
    Base64Source,
    HintBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from mnemoscope.model._base import ToolSchema
from mnemoscope.model._openai_formatter import (
    RAW_ARGUMENTS_KEY,
    format_hint,
    parse_tool_arguments,
)
from mnemoscope.model._response import ChatChunk, ChatResponse, ChatUsage, ToolChoice

_EMPTY_TOOL_OUTPUT = "(no output)"


def _image(block: ImageBlock) -> dict[str, Any]:
    src = block.source
    if isinstance(src, Base64Source):
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": src.media_type, "data": src.data},
        }
    return {"type": "image", "source": {"type": "url", "url": src.url}}


def _tool_result(block: ToolResultBlock) -> dict[str, Any]:
    if isinstance(block.output, str):
        content: str | list[dict[str, Any]] = block.output or _EMPTY_TOOL_OUTPUT
    else:
        content = [
            {"type": "text", "text": b.text} if isinstance(b, TextBlock) else _image(b)
            for b in block.output
        ] or _EMPTY_TOOL_OUTPUT
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.id, "content": content}
    if block.is_error:
        out["is_error"] = True
    return out


def format_anthropic_messages(
    messages: Sequence[Msg],
) -> tuple[str | None, list[dict[str, Any]]]:
    """Convert messages to ``(system, messages)`` for ``client.messages.create``."""
    system_parts: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            if role == "user":
                # tool results must open the user turn that follows the tool uses
                results = [b for b in blocks if b["type"] == "tool_result"]
                others = [b for b in blocks if b["type"] != "tool_result"]
                prev = turns[-1]["content"]
                prev_results = [b for b in prev if b["type"] == "tool_result"]
                prev_others = [b for b in prev if b["type"] != "tool_result"]
                turns[-1]["content"] = prev_results + results + prev_others + others
            else:
                turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})

    for msg in messages:
        if msg.role == "system":
            text = "\n\n".join(
                b.text if isinstance(b, TextBlock) else format_hint(b)
                for b in msg.content
                if isinstance(b, TextBlock | HintBlock)
            )
            if text:
                system_parts.append(text)
            add("user", [_tool_result(b) for b in msg.content if isinstance(b, ToolResultBlock)])
            continue
        role = "assistant" if msg.role == "assistant" else "user"
        own: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        hints: list[dict[str, Any]] = []
        for block in msg.content:
            if isinstance(block, TextBlock):
                if block.text:
                    own.append({"type": "text", "text": block.text})
            elif isinstance(block, ImageBlock):
                own.append(_image(block))
            elif isinstance(block, HintBlock):
                hint = {"type": "text", "text": format_hint(block)}
                (own if role == "user" else hints).append(hint)
            elif isinstance(block, ToolUseBlock):
                if role == "assistant":
                    own.append(_tool_use(block))
            elif isinstance(block, ToolResultBlock):
                results.append(_tool_result(block))
            elif isinstance(block, ThinkingBlock):
                continue
        if role == "assistant":
            add("assistant", own)
            add("user", results + hints)
        else:
            add("user", results + own)
    system = "\n\n".join(system_parts) or None
    return system, turns


def _tool_use(block: ToolUseBlock) -> dict[str, Any]:
    tool_input = block.input
    if RAW_ARGUMENTS_KEY in tool_input and len(tool_input) == 1:
        tool_input = {}  # Anthropic needs an object; the bad raw text cannot be sent back
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input}


def format_anthropic_tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    """Tool schemas as Anthropic ``tools``."""
    return [
        {"name": t["name"], "description": t["description"], "input_schema": t["input_schema"]}
        for t in tools
    ]


def format_anthropic_tool_choice(choice: ToolChoice | None) -> dict[str, Any] | None:
    """``auto`` -> auto, ``required`` -> any, ``none`` -> none, a name -> that tool."""
    if choice is None:
        return None
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    return {"type": "tool", "name": choice}


def _usage(usage: dict[str, Any] | None) -> ChatUsage | None:
    if not usage:
        return None
    cached = int(usage.get("cache_read_input_tokens") or 0) + int(
        usage.get("cache_creation_input_tokens") or 0
    )
    return ChatUsage(
        input_tokens=int(usage.get("input_tokens") or 0) + cached,
        output_tokens=int(usage.get("output_tokens") or 0),
    )


def _content_block(block: dict[str, Any]) -> Any | None:
    kind = block.get("type")
    if kind == "text" and block.get("text"):
        return TextBlock(text=block["text"])
    if kind == "thinking" and block.get("thinking"):
        return ThinkingBlock(thinking=block["thinking"])
    if kind == "tool_use":
        tool_input = block.get("input")
        if isinstance(tool_input, str):
            tool_input = parse_tool_arguments(tool_input)
        return ToolUseBlock(id=block["id"], name=block["name"], input=tool_input or {})
    return None  # redacted_thinking, server tool blocks: not represented


def parse_anthropic_response(data: dict[str, Any]) -> ChatResponse:
    """A Messages API response body (as a dict) to a :class:`ChatResponse`."""
    content = [b for b in map(_content_block, data.get("content") or []) if b is not None]
    return ChatResponse.from_provider(
        content,
        usage=_usage(data.get("usage")),
        stop_reason=data.get("stop_reason"),
        response_id=data.get("id"),
        model=data.get("model"),
    )


class AnthropicStreamAccumulator:
    """Folds Messages API stream events (dicts) into deltas and a final response."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, str] = {}
        self.usage: dict[str, Any] = {}

    def feed(self, event: dict[str, Any]) -> list[ChatChunk]:
        """Take one event; return the text/thinking deltas it carried."""
        kind = event.get("type")
        if kind == "message_start":
            self.message = dict(event.get("message") or {})
            self.usage.update(self.message.get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[event["index"]] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            idx = event["index"]
            block = self.blocks.setdefault(idx, {"type": "text", "text": ""})
            delta = event.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] = (block.get("text") or "") + delta.get("text", "")
                return [ChatChunk(kind="text", delta=delta.get("text", ""))]
            if dtype == "thinking_delta":
                block["thinking"] = (block.get("thinking") or "") + delta.get("thinking", "")
                return [ChatChunk(kind="thinking", delta=delta.get("thinking", ""))]
            if dtype == "input_json_delta":
                self.partial_json[idx] = self.partial_json.get(idx, "") + delta.get(
                    "partial_json", ""
                )
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            if delta.get("stop_reason"):
                self.message["stop_reason"] = delta["stop_reason"]
            self.usage.update({k: v for k, v in (event.get("usage") or {}).items() if v})
        return []

    def finish(self) -> ChatResponse:
        """The complete response assembled from everything fed so far."""
        content = []
        for idx in sorted(self.blocks):
            block = dict(self.blocks[idx])
            if block.get("type") == "tool_use" and idx in self.partial_json:
                block["input"] = parse_tool_arguments(self.partial_json[idx])
            content.append(block)
        return parse_anthropic_response({**self.message, "content": content, "usage": self.usage})
