"""Fact extraction for ``LocalLongTermMemory.record(..., infer=True)``: one LLM call.

The chat model is shown the new conversation and the most related memories already
stored (under short aliases ``m1``, ``m2``, ... so it never has to copy a long id), and
answers with :class:`ExtractedFacts` through ``generate_structured_output``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, Field

from mnemoscope.memory._long_term_base import MemoryItem
from mnemoscope.message import Msg, SystemMsg, UserMsg

INFER_SYSTEM_PROMPT = """\
You maintain a long-term memory about a user. From the new conversation, extract the \
facts worth remembering across sessions: preferences, personal details, plans, decisions, \
events (with their date when known), corrections. Each fact must be one standalone \
sentence that makes sense without the conversation (name people instead of "he"/"she", \
write dates instead of "yesterday" when the conversation's date is given). Skip \
greetings, small talk and anything already stored unchanged. When a new fact replaces, \
corrects or contradicts stored memories, list their aliases (like "m2") in `supersedes`. \
Return an empty list when nothing is worth remembering."""


class ExtractedFact(BaseModel):
    """One standalone fact to remember."""

    text: str = Field(description="The fact, as one standalone sentence.")
    supersedes: list[str] = Field(
        default_factory=list,
        description="Aliases (e.g. 'm1') of stored memories this fact replaces or corrects.",
    )


class ExtractedFacts(BaseModel):
    """The facts worth remembering from a conversation."""

    facts: list[ExtractedFact] = Field(default_factory=list)


def build_infer_messages(
    conversation: Sequence[tuple[str, str, datetime | None]],
    related: Sequence[MemoryItem],
) -> tuple[list[Msg], dict[str, str]]:
    """The messages of the extraction call and the alias -> memory id map.

    Args:
        conversation: ``(speaker, text, when)`` for each new message.
        related: existing memories to show, most related first.
    """
    aliases = {f"m{i}": item.id for i, item in enumerate(related, start=1)}
    if related:
        stored = "\n".join(
            f"- {alias}: {item.content}" for alias, item in zip(aliases, related, strict=True)
        )
    else:
        stored = "(none)"
    lines = []
    for speaker, text, when in conversation:
        stamp = f"[{when:%Y-%m-%d %H:%M}] " if when is not None else ""
        lines.append(f"{stamp}{speaker}: {text}" if speaker else f"{stamp}{text}")
    prompt = (
        f"Stored memories:\n{stored}\n\nNew conversation:\n"
        + "\n".join(lines)
        + "\n\nReturn the facts to remember."
    )
    return [SystemMsg(INFER_SYSTEM_PROMPT), UserMsg("user", prompt)], aliases
