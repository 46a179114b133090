"""A chat model that replays a script: drive agents offline, deterministically.

Example::

    model = ScriptedChatModel([
        tool_call("get_weather", city="Hangzhou"),   # 1st call: the model calls a tool
        "It is sunny in Hangzhou.",                  # 2nd call: the final answer
    ])
    agent = Agent(name="a", system_prompt="...", model=model, toolkit=Toolkit([get_weather]))
    await agent.reply("Weather?")
    model.calls[1].messages   # exactly what the model was shown on the 2nd call

A scripted response is one of:

* ``str``: a text answer;
* a :class:`~mnemoscope.message.ToolUseBlock` (see :func:`tool_call`) or a list of blocks;
* a :class:`~mnemoscope.model.ChatResponse`;
* a ``dict`` or pydantic model: the answer to a structured-output call (it becomes the
  forced tool's arguments);
* a callable ``f(call) -> any of the above`` (sync or async), for answers that depend on
  the input or that should take time (``await asyncio.sleep(...)`` inside).

Structured-output calls (``generate_structured_output``) first draw from
``structured[<model class name>]`` when such a queue is given, so a test can script the
agent's turns and, separately, what a memory-selection call returns.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from mnemoscope.errors import ModelCallError
from mnemoscope.message import TextBlock, ToolUseBlock, new_id
from mnemoscope.model import ChatCall, ChatChunk, ChatModelBase, ChatResponse, ChatUsage


def tool_call(name: str, _id: str | None = None, **tool_input: Any) -> ToolUseBlock:
    """A scripted tool call: ``tool_call("Write", file_path="a.md", content="...")``."""
    return ToolUseBlock(id=_id or f"call_{new_id()[:12]}", name=name, input=tool_input)


class ScriptedCall(ChatCall):
    """One recorded call: what the model was given, with helpers for assertions."""

    @property
    def tool_names(self) -> list[str]:
        return [t["name"] for t in self.tools]

    @property
    def system_prompt(self) -> str:
        return "\n".join(m.get_text_content() for m in self.messages if m.role == "system")

    def text(self) -> str:
        """Every text and hint in the input, for easy assertions."""
        parts: list[str] = []
        for m in self.messages:
            for b in m.content:
                for attr in ("text", "hint", "thinking"):
                    if hasattr(b, attr):
                        parts.append(getattr(b, attr))
                if hasattr(b, "output_text"):
                    parts.append(b.output_text())
        return "\n".join(parts)


class ScriptedChatModel(ChatModelBase):
    """Replays queued responses and records every call (see module docstring).

    Args:
        responses: the main queue, consumed in order.
        structured: per-structured-model queues, keyed by the pydantic class name.
        default: used when the relevant queue is empty (otherwise that is an error).
        stream: stream text word by word through ``stream_chunks``.
    """

    def __init__(
        self,
        responses: Iterable[Any] | None = None,
        *,
        structured: Mapping[str, Iterable[Any]] | None = None,
        default: Any = None,
        model: str = "scripted",
        stream: bool = False,
    ) -> None:
        super().__init__(model, stream=stream)
        self._queue: deque[Any] = deque(responses or [])
        self._structured: dict[str, deque[Any]] = {
            k: deque(v) for k, v in (structured or {}).items()
        }
        self._default = default
        self.calls: list[ScriptedCall] = []

    def queue(self, *responses: Any) -> None:
        """Append responses to the main queue."""
        self._queue.extend(responses)

    def queue_structured(self, name: str, *responses: Any) -> None:
        self._structured.setdefault(name, deque()).extend(responses)

    @property
    def remaining(self) -> int:
        return len(self._queue)

    async def _next(self, call: ScriptedCall) -> ChatResponse:
        forced = (
            call.tool_choice if call.tool_choice not in (None, "auto", "none", "required") else None
        )
        if forced and self._structured.get(str(forced)):
            item = self._structured[str(forced)].popleft()
        elif self._queue:
            item = self._queue.popleft()
        elif self._default is not None:
            item = self._default
        else:
            raise ModelCallError(
                f"ScriptedChatModel ran out of responses after {len(self.calls)} calls "
                f"(tool_choice={call.tool_choice!r}); queue more with .queue(...)"
            )
        if callable(item) and not isinstance(item, BaseModel | type):
            item = item(call)
            if inspect.isawaitable(item):
                item = await item
        return _to_response(item, forced)

    async def _call(self, call: ChatCall) -> ChatResponse:
        # stream_chunks built the call's lists for this call alone: recording them is faithful
        recorded = ScriptedCall(call.messages, call.tools, call.tool_choice, call.kwargs)
        self.calls.append(recorded)
        await asyncio.sleep(0)  # a real model call always yields to the loop
        return await self._next(recorded)

    async def _stream(self, call: ChatCall) -> AsyncIterator[ChatChunk]:
        response = await self._call(call)
        words = response.text.split(" ")
        for i, word in enumerate(words):
            if word or i:
                yield ChatChunk(kind="text", delta=word if i == 0 else " " + word)
        yield ChatChunk(kind="final", final=response)


def _to_response(item: Any, forced: str | None) -> ChatResponse:
    usage = ChatUsage(input_tokens=0, output_tokens=0)
    if isinstance(item, ChatResponse):
        return item
    if isinstance(item, str):
        return ChatResponse(content=[TextBlock(text=item)], usage=usage, stop_reason="stop")
    if isinstance(item, ToolUseBlock):
        return ChatResponse(content=[item], usage=usage, stop_reason="tool_use")
    if isinstance(item, BaseModel) and not hasattr(item, "type"):
        item = item.model_dump(mode="json")
    if isinstance(item, dict):
        if forced:
            return ChatResponse(
                content=[ToolUseBlock(id=f"call_{new_id()[:12]}", name=forced, input=item)],
                usage=usage,
                stop_reason="tool_use",
            )
        return ChatResponse(
            content=[TextBlock(text=json.dumps(item))], usage=usage, stop_reason="stop"
        )
    if isinstance(item, list | tuple):
        blocks = [TextBlock(text=b) if isinstance(b, str) else b for b in item]
        has_tools = any(isinstance(b, ToolUseBlock) for b in blocks)
        return ChatResponse(
            content=blocks, usage=usage, stop_reason="tool_use" if has_tools else "stop"
        )
    raise TypeError(f"cannot turn {type(item).__name__} into a scripted response: {item!r}")
