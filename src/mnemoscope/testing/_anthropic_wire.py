"""The Anthropic Messages API wire format, for :class:`OpenAICompatServer`'s ``/v1/messages``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mnemoscope.testing._server import ServerReply, ServerToolCall, WireAnswer


def _tool_input(call: ServerToolCall) -> Any:
    if isinstance(call.arguments, dict):
        return call.arguments
    try:
        return json.loads(call.arguments)
    except json.JSONDecodeError:
        return {}


def _stop_reason(reply: ServerReply, calls: list[tuple[str, ServerToolCall]]) -> str:
    if reply.finish_reason:
        return {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}.get(
            reply.finish_reason, reply.finish_reason
        )
    return "tool_use" if calls else "end_turn"


def anthropic_message(answer: WireAnswer) -> dict[str, Any]:
    """A non-streamed Messages API response body."""
    reply, calls, usage = answer.reply, answer.calls, answer.usage
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": "sig"})
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for cid, call in calls:
        content.append(
            {"type": "tool_use", "id": cid, "name": call.name, "input": _tool_input(call)}
        )
    return {
        "id": f"msg_{answer.n}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": _stop_reason(reply, calls),
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def anthropic_events(answer: WireAnswer) -> Iterable[tuple[str, str]]:
    """The SSE events of a streamed Messages API response, as ``(event, data)`` pairs."""
    reply, calls, usage = answer.reply, answer.calls, answer.usage
    from mnemoscope.testing._server import split_words

    def ev(kind: str, **payload: Any) -> tuple[str, str]:
        return kind, json.dumps({"type": kind, **payload}, ensure_ascii=False)

    # the stream opens with the message as it starts: no content, one output token so far
    start = anthropic_message(dataclasses.replace(answer, usage=(usage[0], 1)))
    start.update(content=[], stop_reason=None)
    yield ev("message_start", message=start)
    index = 0
    if reply.reasoning:
        block = {"type": "thinking", "thinking": "", "signature": ""}
        yield ev("content_block_start", index=index, content_block=block)
        for piece in split_words(reply.reasoning):
            yield ev(
                "content_block_delta",
                index=index,
                delta={"type": "thinking_delta", "thinking": piece},
            )
        yield ev(
            "content_block_delta",
            index=index,
            delta={"type": "signature_delta", "signature": "sig"},
        )
        yield ev("content_block_stop", index=index)
        index += 1
    if reply.text:
        yield ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
        for piece in split_words(reply.text):
            yield ev(
                "content_block_delta", index=index, delta={"type": "text_delta", "text": piece}
            )
        yield ev("content_block_stop", index=index)
        index += 1
    for cid, call in calls:
        tool_block: dict[str, Any] = {"type": "tool_use", "id": cid, "name": call.name, "input": {}}
        yield ev("content_block_start", index=index, content_block=tool_block)
        text = json.dumps(_tool_input(call), ensure_ascii=False)
        for frag in (text[: len(text) // 2], text[len(text) // 2 :]):
            yield ev(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": frag},
            )
        yield ev("content_block_stop", index=index)
        index += 1
    yield ev(
        "message_delta",
        delta={"stop_reason": _stop_reason(reply, calls), "stop_sequence": None},
        usage={"output_tokens": usage[1]},
    )
    yield ev("message_stop")
