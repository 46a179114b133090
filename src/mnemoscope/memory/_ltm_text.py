"""Text helpers of :class:`~mnemoscope.memory.LocalLongTermMemory`: pure functions.

Normalisation for exact-duplicate detection, the FTS5 query built from a natural-language
question, the terms of the in-process lexical index (FTS5's ``porter unicode61`` in
Python), what a question says about time, the indexed form of a date, a turn's
neighbouring-turn context, and weighted reciprocal rank fusion.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from mnemoscope.text import stem

# English function words. BM25 already gives them a low IDF, but with the query terms
# OR-ed a question such as "What did she do in May?" would otherwise match every row
# through "what", "did" and "she" and crowd out rows that share only its rare words.
_STOPWORD_TEXT = """
    a about above after again against all am an and any are aren as at be because been
    before being below between both but by can could couldn d did didn do does doesn
    doing don down during each few for from further had hadn has hasn have haven having
    he her here hers herself him himself his how i if in into is isn it its itself just
    ll m ma me might more most must my myself no nor not now o of off on once only or
    other our ours ourselves out over own re s same shall she should shouldn so some
    such t than that the their theirs them themselves then there these they this those
    through to too under until up ve very was wasn we were weren what when where which
    while who whom whose why will with won would wouldn y you your yours yourself
    yourselves also ever get got kind like likely many much one ones really say said
    something thing things way well
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Case-folded, NFKC-normalised text with collapsed whitespace and no edge punctuation."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE.sub(" ", text).strip(" \t\n.,;:!?\"'")


def content_hash(text: str) -> str:
    """The hash two texts share when they are the same memory up to case and spacing."""
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()


def query_terms(query: str) -> list[str]:
    """The distinct content words of ``query``, in order (all words if all are stopwords)."""
    words = [w.casefold() for w in _WORD.findall(query)]
    kept = [w for w in words if w not in STOPWORDS] or words
    return list(dict.fromkeys(kept))


def _fold(text: str) -> str:
    """Case-folded, without diacritics (FTS5's ``unicode61 remove_diacritics 2``)."""
    text = text.casefold()
    if text.isascii():
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def index_terms(text: str) -> list[str]:
    """The indexed terms of ``text``: folded, stemmed words, stopwords left out."""
    return [stem(w) for w in _WORD.findall(_fold(text)) if w not in STOPWORDS]


def search_terms(query: str) -> list[str]:
    """The distinct stemmed content words of a question (all words if all are stopwords)."""
    return list(dict.fromkeys(stem(w) for w in query_terms(_fold(query))))


_MONTH_TEXT = (
    "january february march april may june july august september october november december"
)
MONTHS = tuple(_MONTH_TEXT.split())
_MONTH = {m: i + 1 for i, m in enumerate(MONTHS)} | {
    m[:3]: i + 1 for i, m in enumerate(MONTHS) if m != "may"
}
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday"
# words that place an event in time: the answer to "when ...?" holds one
_TIME_TEXT = """
    yesterday today tonight tomorrow ago last next recently earlier later weekend week weeks
    month months year years morning afternoon evening night since until before after soon
    lately
"""
TIME_WORDS: frozenset[str] = frozenset(_TIME_TEXT.split() + list(MONTHS) + _WEEKDAYS.split())
_TIME_DIGITS = re.compile(
    r"\b(?:(?:19|20)\d\d|\d{1,2}(?:st|nd|rd|th)|\d{1,2}[/.-]\d{1,2}(?:[/.-]\d{2,4})?)\b",
    re.IGNORECASE,
)
_DIGIT = re.compile(r"\d")
_WHEN = re.compile(
    r"\b(?:when|what (?:year|month|day|date|time|week)|which (?:year|month|day|date|week)|"
    r"how long ago|since how long)\b",
    re.IGNORECASE,
)
_YEAR = re.compile(r"\b((?:19|20)\d\d)\b")
_MONTH_WORD = re.compile(r"\b(" + "|".join(_MONTH) + r")\b", re.IGNORECASE)


def names_time(text: str) -> bool:
    """Whether ``text`` places something in time ("yesterday", "last May", "in 2022")."""
    if not TIME_WORDS.isdisjoint(_WORD.findall(text.casefold())):
        return True
    return _DIGIT.search(text) is not None and _TIME_DIGITS.search(text) is not None


@dataclass(frozen=True)
class TimeQuery:
    """What a question says about time."""

    asks_when: bool
    """The answer is a time: "When did ...?", "What year ...?", "How long ago ...?"."""
    year: int | None = None
    month: int | None = None
    """A period the question names ("in May 2023", "in 2022"): month and/or year."""


def time_query(query: str) -> TimeQuery:
    """What ``query`` asks or says about time (see :class:`TimeQuery`)."""
    year = _YEAR.search(query)
    # "may" is a month only next to a year or after "in"/"of"/"during"
    month = None
    for m in _MONTH_WORD.finditer(query):
        word = m.group(1).casefold()
        if word == "may" and not (
            year or re.search(r"\b(?:in|of|during|early|late|mid)\s+may\b", query, re.I)
        ):
            continue
        month = _MONTH[word]
        break
    return TimeQuery(
        asks_when=_WHEN.search(query) is not None,
        year=int(year.group(1)) if year else None,
        month=month,
    )


def fts_match(query: str) -> str | None:
    """An FTS5 ``MATCH`` expression: the query's content words, quoted and OR-ed.

    Quoting makes every word a literal (no FTS5 syntax injection); OR-ing lets BM25 rank
    rows by how many (and how rare) of the question's words they contain instead of
    requiring all of them. ``None`` when the query has no word at all.
    """
    terms = query_terms(query)
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


FAR_CONTEXT = "\n\n"
"""Separates a memory's stored context into the next turn on each side and the turns
beyond; a context without it is all near (stores written before it existed)."""


def neighbour_context(lines: Sequence[str | None], i: int, window: int) -> str:
    """The context indexed with ``lines[i]``: its neighbours up to ``window`` away.

    The next turn on each side comes first, one per line; the turns further away follow
    after :data:`FAR_CONTEXT`, so that retrieval can weigh them less. ``None`` entries
    (not turns of the conversation) are left out.
    """

    def join(parts: Sequence[str | None]) -> str:
        return "\n".join(p for p in parts if p)

    near = join([*lines[max(0, i - 1) : i], *lines[i + 1 : i + 2]] if window else [])
    far = join([*lines[max(0, i - window) : max(0, i - 1)], *lines[i + 2 : i + 1 + window]])
    return f"{near}{FAR_CONTEXT}{far}" if far else near


def date_text(when: datetime | None) -> str:
    """The indexed words of a date: ``"Monday 8 May 2023"`` (empty when unknown)."""
    if when is None:
        return ""
    return f"{when:%A} {when.day} {when:%B %Y}"


def to_utc(when: datetime) -> datetime:
    """A timezone-aware datetime in UTC (naive datetimes are taken as UTC)."""
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    return when.astimezone(UTC)


def parse_when(value: object) -> datetime | None:
    """A datetime from a datetime, an ISO-8601 string, or a POSIX timestamp."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), UTC)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def rrf(rankings: Sequence[tuple[Sequence[int], float]], *, k: float) -> list[tuple[int, float]]:
    """Weighted reciprocal rank fusion.

    Each ranking (best first) with weight ``w`` gives the row at 0-based rank ``r`` the
    score ``w / (k + r + 1)``; scores add up across rankings. Returns ``(row, score)``
    best first, ties broken by the first ranking's order.
    """
    scores: dict[int, float] = {}
    for ranking, weight in rankings:
        if weight <= 0:
            continue
        for rank, row in enumerate(ranking):
            scores[row] = scores.get(row, 0.0) + weight / (k + rank + 1)
    return sorted(scores.items(), key=lambda kv: -kv[1])
