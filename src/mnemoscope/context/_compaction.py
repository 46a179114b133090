"""Non-destructive compaction: the oldest history becomes one ``summary``-marked message.

Guarantees:

* the covered messages stay stored, marked ``compressed``; nothing is deleted;
* the summary's ``metadata["covers"]`` lists exactly the ids it stands for (a roll-up
  covers the previous summary and everything that one covered);
* whole tool-call groups only (a use is never split from its results); only history that
  is complete is compacted (the current reply's pending calls never are); pinned
  messages are never compacted;
* the summary is written first, the marks second: a crash between them leaves the
  summary and its originals both stored, and :func:`split_summary` hides the originals
  by the summary's ``covers`` (so a resumed process builds the same context).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mnemoscope.context._policy import COMPRESSED_MARK, COVERS_KEY, SUMMARY_MARK
from mnemoscope.context._recall import searchable_text
from mnemoscope.message import Msg, TextBlock, UserMsg

if TYPE_CHECKING:
    from mnemoscope.context._builder import ContextBuilder
    from mnemoscope.memory import MemoryBase
    from mnemoscope.model import ChatModelBase

SUMMARY_NAME = "summary"
_FACT_PREFIX = "- ["


class SummarizerBase(ABC):
    """Writes the summary of the oldest part of a conversation."""

    @abstractmethod
    async def summarize(self, msgs: Sequence[Msg], previous: Msg | None) -> str:
        """A structured summary (task, state, decisions and facts with their source ids,
        next steps) of ``msgs``, rolling up ``previous`` (an earlier summary) if given."""


class ExtractiveSummarizer(SummarizerBase):
    """A deterministic summariser with no model: one fact line per message (its first
    ``fact_chars`` characters, id and absolute date), the latest ``max_facts`` kept.

    Its quality is modest; it makes compaction reproducible (tests, benchmarks) and
    never fails.
    """

    def __init__(self, *, fact_chars: int = 160, max_facts: int = 40) -> None:
        self.fact_chars = fact_chars
        self.max_facts = max_facts

    async def summarize(self, msgs: Sequence[Msg], previous: Msg | None) -> str:
        prev_text = previous.get_text_content() if previous is not None else ""
        task = _section(prev_text, "Task")
        facts = [ln for ln in prev_text.splitlines() if ln.startswith(_FACT_PREFIX)]
        for m in msgs:
            text = " ".join(searchable_text(m).split())
            if not text:
                continue
            if not task and m.role == "user":
                task = text[: self.fact_chars]
            facts.append(
                f"{_FACT_PREFIX}{m.id} · {m.timestamp:%Y-%m-%d %H:%M} UTC] {m.name}: "
                f"{text[: self.fact_chars]}"
            )
        facts = facts[-self.max_facts :]
        last_user = next(
            (searchable_text(m) for m in reversed(msgs) if m.role == "user"), ""
        ).strip()
        span = (
            f"{msgs[0].timestamp:%Y-%m-%d %H:%M} to {msgs[-1].timestamp:%Y-%m-%d %H:%M} UTC"
            if msgs
            else "nothing new"
        )
        return "\n".join(
            [
                "## Task",
                task or "(not stated)",
                "## State",
                f"Earlier conversation summarised ({span}).",
                "## Decisions and facts",
                *facts,
                "## Next steps",
                f"Continue from the last request: {last_user[: self.fact_chars]}"
                if last_user
                else "(none recorded)",
            ]
        )


SUMMARY_PROMPT = """\
Summarise the earlier part of a conversation so that work can continue from the summary
alone. Write exactly these sections:
## Task        what the user wants overall
## State       where the work stands
## Decisions and facts   one line each: "- [<message id> · <date>] <fact>", keeping every
               name, number, path and decision; write dates as absolute dates
               (the message date is given; "yesterday" becomes a date)
## Next steps  what remains to do
If a previous summary is given, fold it in: keep its facts unless newer messages change them.
"""


class ModelSummarizer(SummarizerBase):
    """Summarises with a chat model (may be a cheaper instance than the agent's)."""

    def __init__(self, model: ChatModelBase, *, prompt: str = SUMMARY_PROMPT) -> None:
        self.model = model
        self.prompt = prompt

    async def summarize(self, msgs: Sequence[Msg], previous: Msg | None) -> str:
        lines = []
        if previous is not None:
            lines.append("Previous summary:\n" + previous.get_text_content())
        lines.append("Messages:")
        for m in msgs:
            lines.append(
                f"[{m.id} · {m.timestamp:%Y-%m-%d %H:%M} UTC · {m.role} {m.name}] "
                f"{searchable_text(m)}"
            )
        from mnemoscope.message import SystemMsg

        response = await self.model([SystemMsg(self.prompt), UserMsg("user", "\n".join(lines))])
        text = response.text.strip()
        if not text:
            raise ValueError("the summariser model returned an empty summary")
        return text


@dataclass
class CompactionContext:
    """One compaction, handed to ``on_compress_context`` middleware.

    A middleware may change ``msgs`` (only by dropping whole groups from the end, to
    compact less), set ``summary_text`` itself (the core then skips the summariser), or
    not call ``next_handler`` at all (nothing is compacted).

    Attributes:
        agent: the agent.
        memory: the short-term memory the summary is written to.
        msgs: the messages to cover, oldest first, whole tool-call groups.
        previous: the summary being rolled up, if any.
        summary_text: the summary, set by the summariser (or by a middleware).
        summary: the stored summary message, set once it is written.
    """

    agent: Any
    memory: MemoryBase
    msgs: list[Msg]
    previous: Msg | None = None
    summary_text: str | None = None
    summary: Msg | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def is_summary(msg: Msg) -> bool:
    return msg.name == SUMMARY_NAME and isinstance(msg.metadata.get(COVERS_KEY), list)


def split_summary(history: Sequence[Msg]) -> tuple[Msg | None, list[Msg]]:
    """``(latest summary, the uncompressed tail)`` of loaded history.

    Messages the latest summary covers are removed even if not marked ``compressed``
    (a crash between writing the summary and marking its originals).
    """
    latest = next((m for m in reversed(history) if is_summary(m)), None)
    if latest is None:
        return None, list(history)
    covered = set(latest.metadata[COVERS_KEY])
    covered.add(latest.id)
    return latest, [m for m in history if m.id not in covered and not is_summary(m)]


def plan_compaction(
    groups: Sequence[Sequence[Msg]],
    builder: ContextBuilder,
    *,
    trigger_tokens: int,
    keep_tokens: int,
    pinned: set[str] = frozenset(),  # type: ignore[assignment]
) -> list[Msg]:
    """The oldest whole groups to compact so the rest fits in ``keep_tokens``; empty
    when history is under ``trigger_tokens``. Groups with a pinned message stay."""
    costs = [sum(builder.msg_tokens(m) for m in g) for g in groups]
    total = sum(costs)
    if total <= trigger_tokens:
        return []
    out: list[Msg] = []
    remaining = total
    for group, cost in zip(groups, costs, strict=True):
        if remaining <= keep_tokens:
            break
        if any(m.id in pinned for m in group):
            continue
        out.extend(group)
        remaining -= cost
    return out


async def write_summary(
    memory: MemoryBase, text: str, covered: Sequence[Msg], previous: Msg | None
) -> Msg:
    """Store the summary (marked ``summary``), then mark the originals ``compressed``."""
    covers = [m.id for m in covered]
    if previous is not None:
        covers = [*previous.metadata.get(COVERS_KEY, []), previous.id, *covers]
    covers = list(dict.fromkeys(covers))
    summary = UserMsg(
        SUMMARY_NAME,
        [TextBlock(text=text)],
        metadata={
            COVERS_KEY: covers,
            "rolls_up": previous.id if previous is not None else None,
            "compacted_at": datetime.now(UTC).isoformat(),
        },
    )
    await memory.add(summary, marks=SUMMARY_MARK)
    marked = [m.id for m in covered] + ([previous.id] if previous is not None else [])
    await memory.update_marks(marked, add=COMPRESSED_MARK)
    return summary


def render_summary(summary: Msg) -> Msg:
    """The summary as the model sees it (byte-identical until the next compaction)."""
    n = len(summary.metadata.get(COVERS_KEY, []))
    return summary.model_copy(
        update={
            "content": [
                TextBlock(
                    text=f"Summary of the {n} earliest messages of this conversation "
                    "(their full text stays searchable with the recall tool):\n\n"
                    + summary.get_text_content()
                )
            ]
        }
    )


def fit_summary(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """``text`` within ``max_tokens``: the oldest fact lines go first (the task, state
    and next steps stay), then the text is cut at a line."""
    if count(text) <= max_tokens:
        return text
    lines = text.splitlines()
    facts = [i for i, ln in enumerate(lines) if ln.startswith(_FACT_PREFIX)]
    # drop the oldest facts in halves of what is left until it fits (few recounts)
    while facts and count("\n".join(lines)) > max_tokens:
        n = max(len(facts) // 2, 1)
        gone = set(facts[:n])
        facts = [i - n for i in facts[n:]]
        lines = [ln for i, ln in enumerate(lines) if i not in gone]
    out = "\n".join(lines)
    if count(out) > max_tokens:  # then shorten the long lines of the other sections
        lines = [ln if len(ln) <= 80 else ln[:77] + "..." for ln in lines]
        out = "\n".join(lines)
    while lines and count(out) > max_tokens:
        lines = lines[: len(lines) * 3 // 4]
        out = "\n".join(lines) + "\n[summary cut to fit its budget]"
    return out


def _section(text: str, name: str) -> str:
    lines = text.splitlines()
    try:
        i = lines.index(f"## {name}")
    except ValueError:
        return ""
    return lines[i + 1].strip() if i + 1 < len(lines) else ""
