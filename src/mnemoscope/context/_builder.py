"""The context builder: what one model call sees, under a token budget.

Order of the model input::

    system prompt
    [omission notice]            when older history was cut, itemised
    selected short-term history  newest kept first, whole tool-call groups only
    injected context             e.g. retrieved long-term memories (this reply only)
    current user message
    this reply's transcript      assistant steps, tool results, hints

The system prompt, the injected context, the current message and this reply's transcript
are always kept; history is dropped oldest-first in *groups* (an assistant message with
tool calls together with the message holding their results), so a tool use is never
separated from its result. Dangling tool uses or results (e.g. from a crashed turn) are
removed from history before counting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mnemoscope.message import HintBlock, Msg, SystemMsg, ToolResultBlock, ToolUseBlock, UserMsg
from mnemoscope.model._tokens import HUGE_TEXT_CHARS, count_tokens, fast_estimate_tokens
from mnemoscope.model._tokens import TokenCounter as TokenCounterLike

PER_MESSAGE_OVERHEAD = 4
"""Tokens charged per message for role/name framing (OpenAI's documented ~3-4)."""


@dataclass
class BuiltContext:
    """The model input and what was left out."""

    messages: list[Msg]
    tokens: int
    """Tokens of the input, or -1 when no budget was set (nothing was counted)."""
    dropped: list[Msg] = field(default_factory=list)
    dropped_tokens: int = 0


class ContextBuilder:
    """Assembles model input under ``max_tokens`` (``None`` = no budget).

    Args:
        max_tokens: budget for the whole input (prompt + history + this reply).
        token_counter: counts tokens of a text (defaults to :func:`count_tokens`).
    """

    def __init__(
        self, max_tokens: int | None = None, token_counter: TokenCounterLike | None = None
    ) -> None:
        self.max_tokens = max_tokens
        self._count = token_counter or count_tokens
        self._cache: dict[str, int] = {}
        self._last_prompt: tuple[str | None, int] = (None, 0)

    def msg_tokens(self, msg: Msg) -> int:
        """Tokens of one message (cached by id: stored messages do not change)."""
        cached = self._cache.get(msg.id)
        if cached is None:
            cached = PER_MESSAGE_OVERHEAD + self.text_tokens(render_for_count(msg))
            if len(self._cache) > 50_000:
                self._cache.clear()
            self._cache[msg.id] = cached
        return cached

    def text_tokens(self, text: str) -> int:
        """Tokens of a text; a huge one is estimated from its size, never tokenised.

        The counter may be a model's exact tokenizer: on a multi-megabyte text (an old
        stored tool result, a pasted log) it would block the event loop for seconds.
        """
        if len(text) > HUGE_TEXT_CHARS:
            return fast_estimate_tokens(text)
        return self._count(text)

    def _prompt_tokens(self, prompt: str) -> int:
        # the prompt is stable within a reply (and usually across replies): count it once
        if self._last_prompt[0] != prompt:
            self._last_prompt = (prompt, self.text_tokens(prompt))
        return self._last_prompt[1]

    def build(
        self,
        *,
        system_prompt: str,
        history: Sequence[Msg],
        current: Msg,
        injected: Sequence[Msg] = (),
        transcript: Sequence[Msg] = (),
    ) -> BuiltContext:
        system = SystemMsg(system_prompt)
        fixed = [*injected, current, *transcript]
        if self.max_tokens is None:
            # no budget: nothing to count, nothing to drop
            clean = sanitize_history(history)
            return BuiltContext([system, *clean, *fixed], tokens=-1)
        fixed_tokens = (
            PER_MESSAGE_OVERHEAD
            + self._prompt_tokens(system_prompt)
            + sum(self.msg_tokens(m) for m in fixed)
        )
        groups = _group(sanitize_history(history))
        kept: list[list[Msg]] = []
        dropped: list[Msg] = []
        budget = None if self.max_tokens is None else self.max_tokens - fixed_tokens
        used = 0
        for group in reversed(groups):
            cost = sum(self.msg_tokens(m) for m in group)
            if budget is not None and (dropped or used + cost > budget):
                dropped.extend(reversed(group))  # reversed again below: oldest first
                continue
            kept.append(group)
            used += cost
        kept.reverse()
        messages: list[Msg] = [system]
        dropped_tokens = sum(self.msg_tokens(m) for m in dropped)
        if dropped:
            dropped.reverse()
            messages.append(omission_notice(dropped, dropped_tokens))
        for group in kept:
            messages.extend(group)
        messages.extend(fixed)
        return BuiltContext(messages, fixed_tokens + used, dropped, dropped_tokens)


def render_for_count(msg: Msg) -> str:
    parts: list[str] = []
    for b in msg.content:
        if isinstance(b, ToolUseBlock):
            parts.append(b.name + str(b.input))
        elif isinstance(b, ToolResultBlock):
            parts.append(b.output_text())
        elif isinstance(b, HintBlock):
            parts.append(b.hint)
        else:
            text = getattr(b, "text", None) or getattr(b, "thinking", None)
            if text:
                parts.append(text)
            elif b.type == "image":
                parts.append("x" * 3000)  # images cost roughly 765+ tokens at detail=high
    return "\n".join(parts)


def omission_notice(dropped: Sequence[Msg], tokens: int) -> Msg:
    first, last = dropped[0].timestamp, dropped[-1].timestamp
    return UserMsg(
        "context",
        [
            HintBlock(
                hint=(
                    f"{len(dropped)} earlier messages of this conversation (about {tokens} "
                    f"tokens, from {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC) were "
                    "left out to fit the context budget. Ask the user if you need them."
                ),
                source="context_budget",
            )
        ],
    )


def sanitize_history(history: Sequence[Msg]) -> list[Msg]:
    """Keep only the tool uses and results that pair up, pairing them by position.

    A result pairs with a use of the *step* right before it (the assistant message with
    tool calls, whose results message directly follows it in storage), matched by id
    within that step only. Ids are not unique across a session (providers reuse
    ``call_0``), so a result whose step was cut off (e.g. by ``max_history_messages``)
    never pairs with a later use of the same id. Unpaired uses and results (a window
    boundary, a half-written turn) are dropped; a message left empty is dropped.
    """
    if not any(isinstance(b, ToolUseBlock | ToolResultBlock) for m in history for b in m.content):
        return list(history)
    drop: set[tuple[int, int]] = set()
    pending: list[tuple[int, int, str]] = []  # unanswered uses of the current step
    for mi, m in enumerate(history):
        has_results = False
        uses: list[tuple[int, int, str]] = []
        for bi, b in enumerate(m.content):
            if isinstance(b, ToolResultBlock):
                has_results = True
                match = next((k for k, p in enumerate(pending) if p[2] == b.id), None)
                if match is None:
                    drop.add((mi, bi))
                else:
                    del pending[match]
            elif isinstance(b, ToolUseBlock):
                uses.append((mi, bi, b.id))
        if uses or not has_results:
            # any message but a results message ends the step: unanswered uses go
            drop.update((p[0], p[1]) for p in pending)
            pending = uses
    drop.update((p[0], p[1]) for p in pending)
    if not drop:
        return list(history)
    out: list[Msg] = []
    for mi, m in enumerate(history):
        blocks = [b for bi, b in enumerate(m.content) if (mi, bi) not in drop]
        if blocks:
            out.append(
                m if len(blocks) == len(m.content) else m.model_copy(update={"content": blocks})
            )
    return out


def _group(history: Sequence[Msg]) -> list[list[Msg]]:
    """Split sanitised history so that a step and the messages holding its results stay
    together (by position: a results message belongs to the step right before it)."""
    groups: list[list[Msg]] = []
    open_step = False
    for m in history:
        has_uses = any(isinstance(b, ToolUseBlock) for b in m.content)
        has_results = any(isinstance(b, ToolResultBlock) for b in m.content)
        if groups and open_step and has_results:
            groups[-1].append(m)
            open_step = True
            continue
        groups.append([m])
        open_step = has_uses
    return groups
