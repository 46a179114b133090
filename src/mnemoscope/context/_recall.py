"""Recall: BM25 search over a session's own stored messages.

The index is built from :meth:`MemoryBase.get`, so it works the same on every backend and
across processes (what another process stored is found on the next ``get``). Message
texts never change once stored, so each message is tokenised once (cached by id); a
query then costs one pass over the candidates' term counts. A database's own full-text
search (FTS5, PostgreSQL ``tsvector``) would need a schema the backends do not share;
Redis has none without a module, so one portable ranking is used everywhere.
"""

from __future__ import annotations

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


def terms(text: str) -> list[str]:
    """Lower-cased, Porter-stemmed word terms of ``text``, without stop words."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP]


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
            words = terms(searchable_text(msg))
            got = (Counter(words), len(words))
            if len(self._counts) > 100_000:
                self._counts.clear()
            self._counts[msg.id] = got
        return got

    def search(self, query: str, candidates: Sequence[Msg], limit: int = 5) -> list[RecallHit]:
        """The ``limit`` best candidates for ``query`` (score > 0), best first."""
        q = set(terms(query))
        if not q or not candidates or limit <= 0:
            return []
        docs = [self._of(m) for m in candidates]
        n = len(docs)
        avg = sum(d[1] for d in docs) / n or 1.0
        df: Counter[str] = Counter()
        for counts, _ in docs:
            for t in q:
                if t in counts:
                    df[t] += 1
        if not df:
            return []
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in df}
        hits: list[RecallHit] = []
        for msg, (counts, length) in zip(candidates, docs, strict=True):
            score = 0.0
            norm = K1 * (1 - B + B * length / avg)
            for t, w in idf.items():
                tf = counts.get(t)
                if tf:
                    score += w * tf * (K1 + 1) / (tf + norm)
            if score > 0:
                hits.append(RecallHit(msg, score))
        hits.sort(key=lambda h: -h.score)
        return hits[:limit]


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
