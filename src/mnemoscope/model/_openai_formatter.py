"""Pure conversion between mnemoscope messages and the OpenAI chat-completions wire format.

Nothing here does I/O, so every rule is unit-testable offline::

    from mnemoscope.message import UserMsg
    from mnemoscope.model._openai_formatter import format_openai_messages

    format_openai_messages([UserMsg("alice", "hi")])
    # [{'role': 'user', 'content': 'hi'}]

Rules (input):

* ``system`` messages become ``{"role": "system"}`` with their text.
* user text and images become ``{"role": "user"}`` (a string, or content parts when an
  image is present; base64 images become ``data:`` URLs).
* assistant text and :class:`ToolUseBlock` s become one ``{"role": "assistant"}`` message
  with ``tool_calls`` (arguments JSON-encoded).
* every :class:`ToolResultBlock` becomes a ``{"role": "tool"}`` message placed right after
  the assistant message that called it; images in a result follow as a user message.
* :class:`ThinkingBlock` s are dropped (providers reject or ignore echoed reasoning).
* :class:`HintBlock` s become text wrapped in
  ``<system-hint source="...">...</system-hint>`` so the model can tell injected context
  from what the user typed (a ``<system-hint`` or ``</system-hint`` inside the hint is
  neutralised, so the text cannot end the wrapper early): inline in user and system
  messages, as a user message after an assistant message; hints never split a tool call
  from its results.

Rules (output): tool-call arguments that are not a JSON object are kept as the raw string
under :data:`RAW_ARGUMENTS_KEY`, so tool input validation reports them to the model;
``reasoning_content`` (DeepSeek, Qwen, vLLM) or ``reasoning`` (Ollama, OpenRouter) becomes a
:class:`ThinkingBlock`.
"""

from __future__ import annotations

import json
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
    URLSource,
    escape_attribute,
    escape_injected,
)
from mnemoscope.model._base import ToolSchema
from mnemoscope.model._response import ChatChunk, ChatResponse, ChatUsage, ToolChoice

RAW_ARGUMENTS_KEY = "_raw_arguments"
"""Key under which tool-call arguments that are not a JSON object are kept, verbatim."""

_EMPTY_TOOL_OUTPUT = "(no output)"
_HINT_TAGS = ("system-hint",)


def format_hint(hint: HintBlock) -> str:
    """The text a :class:`HintBlock` is shown to the model as.

    ``<system-hint`` and ``</system-hint`` inside the hint are neutralised
    (:func:`~mnemoscope.message.escape_injected`), so no text in it can end the wrapper;
    wrappers the producer nested on purpose (``<memory>``) are its own to escape.
    """
    source = f' source="{escape_attribute(hint.source)}"' if hint.source else ""
    text = escape_injected(hint.hint, tags=_HINT_TAGS)
    return f"<system-hint{source}>\n{text}\n</system-hint>"


def image_url(image: ImageBlock) -> str:
    """A URL for the image: its own, or a ``data:`` URL for inline base64 data."""
    src = image.source
    if isinstance(src, URLSource):
        return src.url
    assert isinstance(src, Base64Source)
    return f"data:{src.media_type};base64,{src.data}"


def tool_result_text(block: ToolResultBlock) -> str:
    """The textual content sent back for a tool result (state prefixed when not success)."""
    text = block.output_text() or _EMPTY_TOOL_OUTPUT
    if block.state != "success":
        text = f"[tool {block.state}] {text}"
    return text


def _user_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts


def _tool_call(block: ToolUseBlock) -> dict[str, Any]:
    raw = block.input.get(RAW_ARGUMENTS_KEY)
    if isinstance(raw, str) and len(block.input) == 1:
        arguments = raw  # send back what the model produced, unparsed
    else:
        arguments = json.dumps(block.input, ensure_ascii=False)
    return {
        "id": block.id,
        "type": "function",
        "function": {"name": block.name, "arguments": arguments},
    }


def format_openai_messages(messages: Sequence[Msg]) -> list[dict[str, Any]]:
    """Convert messages to OpenAI chat-completions ``messages`` (see module docstring)."""
    out: list[dict[str, Any]] = []
    pending_hints: list[str] = []  # hints waiting until no tool result can follow

    def flush_hints() -> None:
        if pending_hints:
            out.append({"role": "user", "content": "\n\n".join(pending_hints)})
            pending_hints.clear()

    for msg in messages:
        parts: list[dict[str, Any]] = []
        tool_calls: list[dict[str, Any]] = []
        results: list[ToolResultBlock] = []
        for block in msg.content:
            if isinstance(block, TextBlock):
                if block.text:
                    parts.append({"type": "text", "text": block.text})
            elif isinstance(block, HintBlock):
                if msg.role != "assistant":
                    parts.append({"type": "text", "text": format_hint(block)})
                else:
                    pending_hints.append(format_hint(block))
            elif isinstance(block, ImageBlock):
                parts.append({"type": "image_url", "image_url": {"url": image_url(block)}})
            elif isinstance(block, ToolUseBlock):
                tool_calls.append(_tool_call(block))
            elif isinstance(block, ToolResultBlock):
                results.append(block)
            elif isinstance(block, ThinkingBlock):
                continue

        tool_msgs = _tool_messages(results)
        if msg.role == "assistant":
            if parts or tool_calls:
                text = "\n\n".join(p["text"] for p in parts if p["type"] == "text")
                main: dict[str, Any] = {"role": "assistant", "content": text or None}
                if tool_calls:
                    main["tool_calls"] = tool_calls
                out.append(main)
            out.extend(tool_msgs)
            if not tool_calls or results:  # else the results come next: hints wait
                flush_hints()
        else:
            out.extend(tool_msgs)
            flush_hints()
            if parts:
                if msg.role == "system":
                    text = "\n\n".join(p["text"] for p in parts if p["type"] == "text")
                    out.append({"role": "system", "content": text})
                else:
                    out.append({"role": "user", "content": _user_content(parts)})
    flush_hints()
    return out


def _tool_messages(results: list[ToolResultBlock]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for block in results:
        msgs.append({"role": "tool", "tool_call_id": block.id, "content": tool_result_text(block)})
        if not isinstance(block.output, str):
            for item in block.output:
                if isinstance(item, ImageBlock):
                    images.append({"type": "image_url", "image_url": {"url": image_url(item)}})
    if images:
        # tool messages carry text only; images returned by tools follow as user content
        msgs.append(
            {"role": "user", "content": [{"type": "text", "text": "Images returned by the tools:"}]}
        )
        msgs[-1]["content"].extend(images)
    return msgs


def format_openai_tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    """Tool schemas as OpenAI ``tools`` (function tools)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["input_schema"],
            },
        }
        for t in tools
    ]


def format_openai_tool_choice(choice: ToolChoice | None) -> str | dict[str, Any] | None:
    """``auto``/``none``/``required`` pass through; a tool name forces that function."""
    if choice is None:
        return None
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def parse_tool_arguments(raw: str | None) -> dict[str, Any]:
    """Decode tool-call arguments; anything but a JSON object is kept under the raw key."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {RAW_ARGUMENTS_KEY: raw}
    if not isinstance(value, dict):
        return {RAW_ARGUMENTS_KEY: raw}
    return value


def _reasoning_of(message: dict[str, Any]) -> str:
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def parse_openai_usage(usage: dict[str, Any] | None) -> ChatUsage | None:
    """``prompt_tokens``/``completion_tokens`` as :class:`ChatUsage`."""
    if not usage:
        return None
    return ChatUsage(
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
    )


def parse_openai_response(data: dict[str, Any]) -> ChatResponse:
    """A chat-completions response body (as a dict) to a :class:`ChatResponse`."""
    choices = data.get("choices") or []
    if not choices:
        raise ValueError("the response has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[Any] = []
    reasoning = _reasoning_of(message)
    if reasoning:
        content.append(ThinkingBlock(thinking=reasoning))
    text = message.get("content")
    if isinstance(text, list):  # some servers return content parts
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    if text:
        content.append(TextBlock(text=text))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        content.append(
            ToolUseBlock(
                id=call.get("id") or f"call_{len(content)}",
                name=fn.get("name") or "",
                input=parse_tool_arguments(fn.get("arguments")),
            )
        )
    return ChatResponse.from_provider(
        content,
        usage=parse_openai_usage(data.get("usage")),
        stop_reason=choice.get("finish_reason"),
        response_id=data.get("id"),
        model=data.get("model"),
    )


class OpenAIStreamAccumulator:
    """Folds streamed chat-completion chunks (dicts) into deltas and a final response.

    Tool-call fragments are accumulated by ``index``: the first fragment carries the id and
    name, later ones append to the JSON arguments.
    """

    def __init__(self) -> None:
        self.reply: dict[str, Any] = {}
        """The reply body's ``id``, ``model`` and ``usage``, as the chunks give them."""
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None

    def feed(self, chunk: dict[str, Any]) -> list[ChatChunk]:
        """Take one chunk; return the text/thinking deltas it carried."""
        for key in ("id", "model"):
            self.reply[key] = self.reply.get(key) or chunk.get(key)
        if chunk.get("usage"):  # the last chunk, with stream_options.include_usage
            self.reply["usage"] = chunk["usage"]
        deltas: list[ChatChunk] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = _reasoning_of(delta)
            if reasoning:
                self.thinking.append(reasoning)
                deltas.append(ChatChunk(kind="thinking", delta=reasoning))
            text = delta.get("content")
            if text:
                self.text.append(text)
                deltas.append(ChatChunk(kind="text", delta=text))
            for frag in delta.get("tool_calls") or []:
                idx = frag.get("index", len(self.calls))
                call = self.calls.setdefault(idx, {"id": None, "name": "", "arguments": ""})
                if frag.get("id"):
                    call["id"] = frag["id"]
                fn = frag.get("function") or {}
                if fn.get("name"):
                    call["name"] = fn["name"]
                if fn.get("arguments"):
                    call["arguments"] += fn["arguments"]
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return deltas

    def finish(self) -> ChatResponse:
        """The complete response assembled from everything fed so far: the stream folded
        into one reply body, parsed as a non-streamed reply is."""
        message = {
            "reasoning_content": "".join(self.thinking),
            "content": "".join(self.text),
            "tool_calls": [
                {
                    "id": call["id"] or f"call_{idx}",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for idx, call in sorted(self.calls.items())
            ],
        }
        choice = {"message": message, "finish_reason": self.finish_reason}
        return parse_openai_response({**self.reply, "choices": [choice]})
