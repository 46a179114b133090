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
from datetime import UTC, datetime
from typing import Any

from mnemoscope.context._recall import RecallIndex, render_recalled, render_turn, searchable_text
from mnemoscope.errors import PinBudgetError
from mnemoscope.message import HintBlock, Msg, SystemMsg, ToolResultBlock, ToolUseBlock, UserMsg
from mnemoscope.model import HUGE_TEXT_CHARS, count_tokens, fast_estimate_tokens
from mnemoscope.model import TokenCounter as TokenCounterLike

PER_MESSAGE_OVERHEAD = 4
"""Tokens charged per message for role/name framing (OpenAI's documented ~3-4)."""

_Prepared = tuple[list[Msg], list[str], list[list[Msg]], list[int]]
"""History as the builder uses it: sanitised messages, ids of the stubbed ones, the
tool-call groups and the tokens of each group."""


@dataclass
class BuiltContext:
    """The model input and what was left out."""

    messages: list[Msg]
    tokens: int
    """Tokens of the whole input (the sum of ``parts``), with a budget or without."""
    dropped: list[Msg] = field(default_factory=list)
    dropped_tokens: int = 0
    parts: dict[str, int] = field(default_factory=dict)
    """Tokens per part: ``system``, ``summary``, ``pinned``, ``history``, ``recalled``,
    ``injected``, ``current``, ``transcript``, ``notice`` (with no budget nothing is
    dropped, pinned apart or recalled: those parts are 0)."""
    kept_ids: list[str] = field(default_factory=list)
    recalled_ids: list[str] = field(default_factory=list)
    pinned_ids: list[str] = field(default_factory=list)
    offloaded_ids: list[str] = field(default_factory=list)
    """History messages whose tool results were shown as stubs."""


@dataclass
class BuildOptions:
    """What the agent's context policy adds to a plain budgeted build."""

    summary: Msg | None = None
    pinned: frozenset[str] = frozenset()
    pin_tokens: int | None = None
    recall_pool: Sequence[Msg] = ()
    recall_tokens: int = 0
    recall_query: str = ""
    notice_how: str | None = None
    clear_tool_results_after: int | None = None
    clear_exclude_tools: frozenset[str] = frozenset()


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
        self._last_prompt: tuple[str, Msg, int] | None = None
        self._recall = RecallIndex()
        self._prepared_cache: tuple[Any, _Prepared] | None = None
        self._notice_cache: dict[str | None, int] = {}

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

    def _system(self, prompt: str) -> tuple[Msg, int]:
        """The system message and its tokens. The prompt is stable within a reply (and
        usually across replies): it is counted, and its message built, once."""
        last = self._last_prompt
        if last is None or last[0] != prompt:
            last = (prompt, SystemMsg(prompt), PER_MESSAGE_OVERHEAD + self.text_tokens(prompt))
            self._last_prompt = last
        return last[1], last[2]

    def build(
        self,
        *,
        system_prompt: str,
        history: Sequence[Msg],
        current: Msg,
        injected: Sequence[Msg] = (),
        transcript: Sequence[Msg] = (),
        options: BuildOptions | None = None,
    ) -> BuiltContext:
        opts = options or BuildOptions()
        system, system_tokens = self._system(system_prompt)
        prefix: list[Msg] = [system]
        if opts.summary is not None:
            prefix.append(opts.summary)
        fixed = [*injected, current, *transcript]
        clean, offloaded, groups, costs = self._prepared(history, opts)
        # every part is counted, with a budget or without (the ContextEvent reports them);
        # stored messages are counted once (cached by id), so a call counts only what is new
        parts = {
            "system": system_tokens,
            "summary": self.msg_tokens(opts.summary) if opts.summary is not None else 0,
            "injected": sum(self.msg_tokens(m) for m in injected),
            "current": self.msg_tokens(current),
            "transcript": sum(self.msg_tokens(m) for m in transcript),
        }
        if self.max_tokens is None:
            # no budget: nothing is dropped, pinned apart or recalled
            parts.update(pinned=0, history=sum(costs), recalled=0, notice=0)
            return BuiltContext(
                [*prefix, *clean, *fixed],
                tokens=sum(parts.values()),
                parts=parts,
                kept_ids=[m.id for m in clean],
                offloaded_ids=offloaded,
            )
        fixed_tokens = sum(parts.values())
        pinned_groups = (
            {i for i, g in enumerate(groups) if any(m.id in opts.pinned for m in g)}
            if opts.pinned
            else set()
        )
        pin_cost = sum(costs[i] for i in pinned_groups)
        if opts.pin_tokens is not None and pin_cost > opts.pin_tokens:
            raise PinBudgetError(
                f"pinned messages need about {pin_cost} tokens, over the pin budget "
                f"ContextPolicy.pin_tokens={opts.pin_tokens}; unpin some (memory."
                f"update_marks(ids, remove='pinned')) or raise pin_tokens"
            )
        parts["pinned"] = pin_cost
        budget = self.max_tokens - fixed_tokens - pin_cost - opts.recall_tokens
        if sum(costs) - pin_cost > budget:
            budget -= self._notice_reserve(opts.notice_how)  # the notice fits the budget too
        keep = set(pinned_groups)
        dropped: list[Msg] = []
        dropped_tokens = 0
        used = 0
        cut = False
        for i in range(len(groups) - 1, -1, -1):
            if i in pinned_groups:
                continue
            cost = costs[i]
            if cut or used + cost > budget:
                cut = True
                dropped.extend(reversed(groups[i]))
                dropped_tokens += cost
                continue
            keep.add(i)
            used += cost
        dropped.reverse()
        parts["history"] = used
        # automatic recall: the dropped and compacted turns most relevant to the message
        recalled: list[Msg] = []
        recall_msg: Msg | None = None
        parts["recalled"] = 0
        if opts.recall_tokens > 0 and (dropped or opts.recall_pool):
            recall_msg, recalled, parts["recalled"] = self._recall_hint(
                opts, [*opts.recall_pool, *dropped], current
            )
        messages: list[Msg] = list(prefix)
        parts["notice"] = 0
        if dropped:
            notice = omission_notice(dropped, dropped_tokens, how=opts.notice_how)
            parts["notice"] = self.msg_tokens(notice)
            messages.append(notice)
        kept_ids: list[str] = []
        for i, group in enumerate(groups):
            if i in keep:
                messages.extend(group)
                kept_ids.extend(m.id for m in group)
        if recall_msg is not None:
            messages.append(recall_msg)
        messages.extend(fixed)
        kept = set(kept_ids)
        return BuiltContext(
            messages,
            sum(parts.values()),
            dropped,
            dropped_tokens,
            parts=parts,
            kept_ids=kept_ids,
            recalled_ids=[m.id for m in recalled],
            pinned_ids=[m.id for i in sorted(pinned_groups) for m in groups[i]],
            offloaded_ids=[i for i in offloaded if i in kept],
        )

    def _recall_line_tokens(self, msg: Msg) -> int:
        key = "recall:" + msg.id
        cached = self._cache.get(key)
        if cached is None:
            cached = self.text_tokens(render_turn(msg, short_ids=True))
            self._cache[key] = cached
        return cached

    def _prepared(self, history: Sequence[Msg], opts: BuildOptions) -> _Prepared:
        """Sanitised history, stubbed ids, groups and their tokens; cached while history
        is the same (every model call of a reply, and replies that add nothing between)."""
        key = (
            tuple(m.id for m in history),
            opts.clear_tool_results_after,
            opts.clear_exclude_tools,
        )
        if self._prepared_cache is not None and self._prepared_cache[0] == key:
            return self._prepared_cache[1]
        clean = sanitize_history(history)
        offloaded: list[str] = []
        if opts.clear_tool_results_after is not None:
            clean, offloaded = clear_old_results(
                clean, opts.clear_tool_results_after, opts.clear_exclude_tools
            )
        groups = group_history(clean)
        costs = [sum(self.msg_tokens(m) for m in g) for g in groups]
        prepared = (clean, offloaded, groups, costs)
        self._prepared_cache = (key, prepared)
        return prepared

    def _notice_reserve(self, how: str | None) -> int:
        cached = self._notice_cache.get(how)
        if cached is not None:
            return cached
        sample = UserMsg(
            "context", [HintBlock(hint=_notice_text(99_999, 9_999_999, _EPOCH, _EPOCH, how))]
        )
        cached = PER_MESSAGE_OVERHEAD + self.text_tokens(render_for_count(sample))
        self._notice_cache[how] = cached
        return cached

    def _recall_hint(
        self, opts: BuildOptions, pool: Sequence[Msg], current: Msg
    ) -> tuple[Msg | None, list[Msg], int]:
        query = opts.recall_query or searchable_text(current)
        hits = self._recall.search(query, pool, limit=max(opts.recall_tokens // 8, 8))
        header = (
            "Earlier turns of this conversation that may be relevant (recalled verbatim, "
            "with id and date):"
        )
        chosen: list[Msg] = []
        used = PER_MESSAGE_OVERHEAD + self.text_tokens(header)
        for hit in hits:
            # what the hint will hold: the rendered line, not the message as stored
            cost = self._recall_line_tokens(hit.msg) + 1
            if used + cost > opts.recall_tokens:
                continue
            chosen.append(hit.msg)
            used += cost
        if not chosen:
            return None, [], 0
        chosen.sort(key=lambda m: m.timestamp)
        hint = HintBlock(
            hint=header + "\n\n" + render_recalled(chosen, short_ids=True), source="recall"
        )
        return UserMsg("context", [hint]), chosen, used


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


NOTICE_ASK = "Ask the user if you need them."


def omission_notice(dropped: Sequence[Msg], tokens: int, how: str | None = None) -> Msg:
    """The itemised notice of cut history; ``how`` tells the model how to get it back
    (e.g. "Search them with the recall tool."), else it is told to ask the user."""
    first, last = dropped[0].timestamp, dropped[-1].timestamp
    return UserMsg(
        "context",
        [
            HintBlock(
                hint=_notice_text(len(dropped), tokens, first, last, how), source="context_budget"
            )
        ],
    )


_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _notice_text(n: int, tokens: int, first: datetime, last: datetime, how: str | None) -> str:
    return (
        f"{n} earlier messages of this conversation (about {tokens} "
        f"tokens, from {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC) were "
        f"left out to fit the context budget. {how or NOTICE_ASK}"
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


def group_history(history: Sequence[Msg]) -> list[list[Msg]]:
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


STUB_TEXT = (
    "[cleared from the context: {chars:,} characters of output. Read it with "
    "read_tool_output(message_id={msg_id!r}, index={index})]"
)


def clear_old_results(
    history: Sequence[Msg], keep_last: int, exclude: frozenset[str] = frozenset()
) -> tuple[list[Msg], list[str]]:
    """Show the tool results of all but the last ``keep_last`` result messages as stubs.

    Only the output changes (ids, names and states stay), so every use keeps its result;
    results of tools in ``exclude`` stay whole. Returns the history and the ids of the
    messages that were stubbed.
    """
    positions = [i for i, m in enumerate(history) if m.tool_results]
    old = positions[: max(len(positions) - keep_last, 0)]
    if not old:
        return list(history), []
    out = list(history)
    stubbed: list[str] = []
    for i in old:
        m = out[i]
        blocks = []
        changed = False
        for bi, b in enumerate(m.content):
            if isinstance(b, ToolResultBlock) and b.name not in exclude:
                text = b.output_text()
                full = m.metadata.get("full_outputs", {}).get(str(bi))
                size = len(full) if isinstance(full, str) else len(text)
                if size > 200:
                    stub = STUB_TEXT.format(chars=size, msg_id=m.id, index=bi)
                    b = b.model_copy(update={"output": stub})
                    changed = True
            blocks.append(b)
        if changed:
            out[i] = m.model_copy(update={"content": blocks})
            stubbed.append(m.id)
    return out, stubbed
