"""The model calls of one reply: what each call received, part by part, with tokens.

An agent reports each model call's composition as a ``ContextEvent``, but only in its
event stream (the service's reply log), not with the session; so the default source,
:class:`ReconstructedCallSource`, rebuilds it from the stored session with the same
:class:`~mnemoscope.context.ContextBuilder` the agent uses: history before the reply (hints
excluded, as the agent loads it), the message that started the reply, and the reply's
transcript up to each call (hints and tool results included). What is not stored cannot be
rebuilt, and each view says so in :attr:`ModelCallView.missing`: the system prompt (unless
given), the long-term memories injected for the reply, and which messages were compacted,
offloaded or recalled.

Extension point: a source that has the real records subclasses
:class:`ModelCallSourceBase` and returns views with ``source="recorded"``; pass it as
``calls=`` to :func:`~mnemoscope.inspector.create_inspector_app`.
:class:`~mnemoscope.inspector.ServiceEventCallSource` is one: it reads the
``ContextEvent`` records kept in the service's reply logs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from mnemoscope.context import ContextBuilder
from mnemoscope.inspector._sessions import StoredEntry
from mnemoscope.message import HintBlock, Msg, ToolResultBlock, ToolUseBlock

HINT_MARK = "hint"
SUMMARY_MARK = "summary"


@dataclass
class ContextPart:
    """One part of a model call's input."""

    name: str
    """``system prompt``, ``omitted history``, ``history``, ``injected memories``,
    ``current message``, ``hints``, ``transcript``."""
    tokens: int | None
    """Tokens of the part (``None``: unknown)."""
    msg_ids: list[str] = field(default_factory=list)
    text: str | None = None
    """The text of a part that is not a stored message (the system prompt, a notice)."""
    note: str = ""


@dataclass
class ModelCallView:
    """What one model call of a reply received."""

    index: int
    """1-based position of the call in the reply."""
    response_id: str | None
    """The stored assistant message the call produced (``None``: none stored)."""
    parts: list[ContextPart]
    source: Literal["recorded", "reconstructed"] = "reconstructed"
    dropped_ids: list[str] = field(default_factory=list)
    compacted_ids: list[str] = field(default_factory=list)
    offloaded_ids: list[str] = field(default_factory=list)
    recalled_ids: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """What this view cannot show, and why."""
    usage: dict[str, object] | None = None
    """The provider's token usage for the call, when it was stored with the response."""
    recorded_tokens: dict[str, int] = field(default_factory=dict)
    """Tokens per part as the agent counted them for this call (its ``ContextEvent``:
    ``system``, ``summary``, ``pinned``, ``history``, ``recalled``, ``injected``,
    ``current``, ``transcript``, ``notice``); empty for a reconstructed call."""
    recorded_total: int | None = None
    """The whole input's tokens as the agent counted them (``None``: not recorded)."""
    in_progress: bool = False
    """The reply has not stored this call's response yet: the call (or the tools it asked
    for) is running now, or the reply stopped before its answer. Only the last call of the
    session's last reply can be in progress; the page then updates itself (live)."""

    @property
    def tokens(self) -> int | None:
        if self.recorded_total is not None:
            return self.recorded_total
        counts = [p.tokens for p in self.parts]
        return None if any(c is None for c in counts) else sum(c or 0 for c in counts)


class ModelCallSourceBase(ABC):
    """Where the inspector gets the model calls of a reply from."""

    @abstractmethod
    async def calls(
        self, user_id: str, session_id: str, reply_start: str, entries: Sequence[StoredEntry]
    ) -> list[ModelCallView]:
        """The calls of the reply started by the message ``reply_start``.

        Args:
            entries: the whole session, in order (already scoped to ``user_id``).
        """


def is_reply_start(entry: StoredEntry) -> bool:
    """A message that starts a reply: a user message, not a hint, summary or tool results."""
    m = entry.msg
    if m is None or m.role != "user" or {HINT_MARK, SUMMARY_MARK} & set(entry.marks):
        return False
    return not any(isinstance(b, ToolResultBlock | HintBlock) for b in m.content)


SystemPrompt = str | Callable[[str, str], "str | None"] | None


class ReconstructedCallSource(ModelCallSourceBase):
    """Rebuild each call's input from the stored session (see the module docstring).

    Args:
        system_prompt: the agent's system prompt, or ``(user_id, session_id) -> prompt``;
            ``None``: not shown (it is not stored with the session).
        max_tokens: the agent's context budget (its ``ContextBuilder.max_tokens``), so the
            history dropped to fit it is shown; ``None``: no budget.
        max_history_messages: the agent's ``max_history_messages``.
    """

    def __init__(
        self,
        *,
        system_prompt: SystemPrompt = None,
        max_tokens: int | None = None,
        max_history_messages: int | None = None,
    ) -> None:
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self.max_history_messages = max_history_messages

    async def calls(
        self, user_id: str, session_id: str, reply_start: str, entries: Sequence[StoredEntry]
    ) -> list[ModelCallView]:
        start = next(
            (i for i, e in enumerate(entries) if e.msg_id == reply_start and is_reply_start(e)),
            None,
        )
        if start is None:
            return []
        current = entries[start].msg
        assert current is not None
        history = [e.msg for e in entries[:start] if e.msg is not None and HINT_MARK not in e.marks]
        if self.max_history_messages is not None:
            history = history[-self.max_history_messages :] if self.max_history_messages else []
        hint_ids = {e.msg_id for e in entries if HINT_MARK in e.marks}
        prompt = self.system_prompt
        if callable(prompt):
            prompt = prompt(user_id, session_id)
        builder = ContextBuilder(self.max_tokens)
        counting = ContextBuilder(None)
        out: list[ModelCallView] = []
        transcript: list[Msg] = []

        def call(response: Msg | None) -> ModelCallView:
            """The call that produced ``response`` (``None``: the one now running)."""
            built = builder.build(
                system_prompt=prompt or "", history=history, current=current, transcript=transcript
            )
            return self._view(
                len(out) + 1,
                response,
                built.messages,
                built.dropped,
                len(transcript),
                prompt,
                hint_ids,
                counting,
            )

        answered = False
        for e in entries[start + 1 :]:
            if is_reply_start(e):
                return out  # a later reply started: this one ended, answered or not
            if e.msg is None:
                continue
            if e.msg.role == "assistant":
                out.append(call(e.msg))
                answered = not e.msg.has_content_blocks(ToolUseBlock)
            elif HINT_MARK not in e.marks:
                answered = False  # tool results: the model is asked again
            transcript.append(e.msg)
        if not answered:
            out.append(call(None))
        return out

    def _view(
        self,
        index: int,
        response: Msg | None,
        messages: list[Msg],
        dropped: list[Msg],
        n_transcript: int,
        prompt: str | None,
        hint_ids: set[str],
        counting: ContextBuilder,
    ) -> ModelCallView:
        rest = messages[1:]  # after the system prompt
        parts = [
            ContextPart(
                "system prompt",
                counting.text_tokens(prompt) if prompt else None,
                text=prompt,
                note="" if prompt else "not stored with the session",
            )
        ]
        if dropped:
            notice, rest = rest[0], rest[1:]
            parts.append(
                ContextPart(
                    "omitted history",
                    counting.msg_tokens(notice),
                    [m.id for m in dropped],
                    text=_hint_text(notice),
                    note=f"{len(dropped)} messages left out to fit {self.max_tokens} tokens",
                )
            )
        # rest = kept history + current message + this reply's transcript so far
        cut = len(rest) - 1 - n_transcript
        kept, current, transcript = rest[:cut], rest[cut], rest[cut + 1 :]
        hints = [m for m in transcript if m.id in hint_ids]
        steps = [m for m in transcript if m.id not in hint_ids]
        for name, msgs in (
            ("history", kept),
            ("current message", [current]),
            ("hints", hints),
            ("transcript", steps),
        ):
            if msgs or name == "history":
                parts.append(
                    ContextPart(
                        name, sum(counting.msg_tokens(m) for m in msgs), [m.id for m in msgs]
                    )
                )
        missing = [
            "injected long-term memories of the reply (not stored with the session)",
            "compacted, offloaded and recalled messages (the agent's context events are not "
            "stored with the session)",
        ]
        if not prompt:
            missing.insert(0, "the system prompt (pass system_prompt= to the inspector)")
        if self.max_tokens is None:
            missing.append("what the token budget dropped (pass max_tokens= to the inspector)")
        usage = response.metadata.get("usage") if response is not None else None
        # what the summaries in this input stand for (their metadata lists the ids)
        compacted = [c for m in kept for c in summary_covers(m)]
        return ModelCallView(
            index,
            response.id if response is not None else None,
            parts,
            dropped_ids=[m.id for m in dropped],
            compacted_ids=list(dict.fromkeys(compacted)),
            missing=missing,
            usage=usage if isinstance(usage, dict) else None,
            in_progress=response is None,
        )


SUMMARY_COVERS_KEYS = ("covers", "covered_ids", "summarized_ids", "source_ids")
"""Metadata keys of a summary message that list the ids of the messages it covers (the
first one present is used)."""


def summary_covers(msg: Msg) -> list[str]:
    """The ids a summary message covers, from its metadata (empty for other messages)."""
    for key in SUMMARY_COVERS_KEYS:
        value = msg.metadata.get(key)
        if isinstance(value, list):
            return [v for v in value if isinstance(v, str) and v]
    return []


def _hint_text(msg: Msg) -> str:
    return "\n".join(b.hint for b in msg.content if isinstance(b, HintBlock))
