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


@dataclass
class _Postings:
    """An inverted index of one candidate list: for each term, ``(position, count)`` of
    the candidates holding it, and each candidate's BM25 length norm."""

    ids: tuple[str, ...]
    terms: dict[str, list[tuple[int, int]]]
    norms: list[float]


class RecallIndex:
    """Ranks messages against a query with BM25 (term counts cached by message id; the
    inverted index of the last candidate list is kept, as every model call of a reply,
    and replies that cut nothing new, search the same candidates)."""

    def __init__(self) -> None:
        self._counts: dict[str, tuple[Counter[str], int]] = {}
        self._postings: _Postings | None = None

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

    def _index(self, candidates: Sequence[Msg]) -> _Postings:
        ids = tuple(m.id for m in candidates)
        if self._postings is not None and self._postings.ids == ids:
            return self._postings
        postings: dict[str, list[tuple[int, int]]] = {}
        lengths: list[int] = []
        for i, msg in enumerate(candidates):
            counts, length = self._of(msg)
            lengths.append(length)
            for term, count in counts.items():
                postings.setdefault(term, []).append((i, count))
        avg = sum(lengths) / len(lengths) or 1.0
        norms = [K1 * (1 - B + B * length / avg) for length in lengths]
        self._postings = _Postings(ids, postings, norms)
        return self._postings

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
        index = self._index(candidates)
        n = len(candidates)
        scores = [0.0] * n
        matched = False
        for term in q:
            holders = index.terms.get(term)
            if not holders:
                continue
            matched = True
            df = len(holders)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for i, count in holders:
                scores[i] += idf * count * (K1 + 1) / (count + index.norms[i])
        if not matched:
            return []
        # the answer often sits next to the turn that names the topic ("How was the
        # support group?" / "So moving, I cried"): a turn shares its neighbours' match
        before = [0.0, *scores[:-1]]
        after = [*scores[1:], 0.0]
        total = [
            score + NEIGHBOUR_SHARE * (b if b > a else a)
            for score, b, a in zip(scores, before, after, strict=True)
        ]
        best = heapq.nlargest(limit, range(n), key=total.__getitem__)
        return [RecallHit(candidates[i], total[i]) for i in best if total[i] > 0]


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
