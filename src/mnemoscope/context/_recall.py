"""Recall: BM25 search over a session's own stored messages.

The index is built from :meth:`MemoryBase.get`, so it works the same on every backend and
across processes (what another process stored is found on the next ``get``). Message
texts never change once stored, so each message is tokenised once (cached by id); a
query then costs one pass over the candidates' term counts.

The ranking is BM25 over stemmed words, with two things a conversation adds: the
speaker's name is indexed with each turn (a question about "Anna" finds what Anna said,
though she never says her own name), and a turn shares half of its better neighbour's
score (the answer to "How was the support group?" rarely repeats those words). A
hyphenated word also counts joined ("de-stress" matches "destress"). A database's own full-text
search (FTS5, PostgreSQL ``tsvector``) would need a schema the backends do not share;
Redis has none without a module, so one portable ranking is used everywhere.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mnemoscope.message import HintBlock, Msg, TextBlock, ToolResultBlock, ToolUseBlock
from mnemoscope.text import stem

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP_WORDS = (
    "a an and are as at be but by do did does for from had has have he her his i if "
    "in is it its me my no not of on or our she so that the their them then there "
    "they this to was we were what when where which who why will with you your how"
)
_STOP = frozenset(_STOP_WORDS.split(" "))
K1 = 1.2
B = 0.75
NEIGHBOUR_SHARE = 0.5
"""Share of its better neighbour's score a turn gains (see :meth:`RecallIndex.search`)."""


_HYPHENATED = re.compile(r"[^\W_]+(?:-[^\W_]+)+", re.UNICODE)


def terms(text: str) -> list[str]:
    """Lower-cased, Porter-stemmed word terms of ``text``, without stop words; a
    hyphenated word also counts joined ("de-stress" is "de", "stress" and "destress")."""
    low = text.lower()
    words = [w for w in _WORD.findall(low) if w not in _STOP]
    if "-" in low:
        words += [h.replace("-", "") for h in _HYPHENATED.findall(low)]
    return [stem(w) for w in words]


def searchable_text(msg: Msg) -> str:
    """The text of a message that recall searches and shows."""
    parts: list[str] = []
    for b in msg.content:
        if isinstance(b, TextBlock):
            parts.append(b.text)
        elif isinstance(b, ToolResultBlock):
            parts.append(b.output_text())
        elif isinstance(b, ToolUseBlock):
            parts.append(f"{b.name}({b.input})")
        elif isinstance(b, HintBlock):
            parts.append(b.hint)
    return "\n".join(parts)


@dataclass
class RecallHit:
    msg: Msg
    score: float


class RecallIndex:
    """Ranks messages against a query with BM25 (term counts cached by message id)."""

    def __init__(self) -> None:
        self._counts: dict[str, tuple[Counter[str], int]] = {}

    def _of(self, msg: Msg) -> tuple[Counter[str], int]:
        got = self._counts.get(msg.id)
        if got is None:
            # who said it is part of the turn: "what did Anna say about X" finds Anna's turns
            words = terms(msg.name) + terms(searchable_text(msg))
            got = (Counter(words), len(words))
            if len(self._counts) > 100_000:
                self._counts.clear()
            self._counts[msg.id] = got
        return got

    def search(self, query: str, candidates: Sequence[Msg], limit: int = 5) -> list[RecallHit]:
        """The ``limit`` best candidates for ``query`` (score > 0), best first.

        ``candidates`` are in conversation order: a turn's score is its BM25 score plus
        :data:`NEIGHBOUR_SHARE` of the better of its two neighbours' (the candidates
        before and after it), so the reply to a matching turn is found even when it
        does not repeat the words. The speaker's name is indexed with the text.
        """
        q = set(terms(query))
        if not q or not candidates or limit <= 0:
            return []
        docs = [self._of(m) for m in candidates]
        n = len(docs)
        avg = sum(d[1] for d in docs) / n or 1.0
        # the query terms each turn holds (a set intersection, in C): most hold none
        matched = [(i, counts.keys() & q) for i, (counts, _) in enumerate(docs)]
        matched = [(i, common) for i, common in matched if common]
        if not matched:
            return []
        df = Counter(t for _, common in matched for t in common)
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in df}
        scores: dict[int, float] = {}
        for i, common in matched:
            counts, length = docs[i]
            norm = K1 * (1 - B + B * length / avg)
            scores[i] = sum(idf[t] * counts[t] * (K1 + 1) / (counts[t] + norm) for t in common)
        # the answer often sits next to the turn that names the topic ("How was the
        # support group?" / "So moving, I cried"): a turn shares its neighbours' match
        lift: dict[int, float] = {}
        for i, score in scores.items():
            for j in (i - 1, i + 1):
                if 0 <= j < n and lift.get(j, 0.0) < score:
                    lift[j] = score
        total = dict(scores)
        for j, score in lift.items():
            total[j] = total.get(j, 0.0) + NEIGHBOUR_SHARE * score
        best = heapq.nlargest(limit, total.items(), key=lambda item: item[1])
        return [RecallHit(candidates[i], score) for i, score in best]


def render_recalled(
    msgs: Iterable[Msg], max_chars: int | None = None, *, short_ids: bool = False
) -> str:
    """Verbatim turns with id and date, one block each (what ``recall`` shows).

    ``short_ids`` shows the first 8 characters of each id (automatic recall, where every
    token counts against the recall budget)."""
    return "\n\n".join(render_turn(m, max_chars, short_ids=short_ids) for m in msgs)


def render_turn(msg: Msg, max_chars: int | None = None, *, short_ids: bool = False) -> str:
    text = searchable_text(msg)
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars] + " [...]"
    ident = msg.id[:8] if short_ids else msg.id
    return f"[{ident} · {msg.timestamp:%Y-%m-%d %H:%M} UTC · {msg.name}] {text}"
