"""A small local BM25 ranker over memory files (no model, no dependency).

Each document is a memory's name and description (weighted x2: they are written as
retrieval triggers) plus its body. Text is split into lower-cased words with a light
suffix stemmer and an English stop-word list; runs of CJK characters become character
unigrams and bigrams, so Chinese memories are searchable without a segmenter.

Example::

    ranker = BM25Ranker([("a.md", "User profile", "Lives in Hangzhou", "...")])
    ranker.search("where does the user live?", k=5)   # [("a.md", 1.23)]
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

_WORD_RE = re.compile(
    r"[0-9a-z\u00c0-\u024f]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+"
)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")

_STOPWORDS_TEXT = """a about above after again against all am an and any are as at be because
been before being below between both but by can could did do does doing down during each few
for from further had has have having he her here hers herself him himself his how i if in into
is it its itself just me more most my myself no nor not now of off on once only or other our
ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
also get got s t don doesn didn ve ll re d m o y"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


_VOWELS = frozenset("aeiouy")


@functools.lru_cache(maxsize=100_000)
def _stem(word: str) -> str:
    """A light Porter-style stemmer: plural, -ed/-ing, final -e and -y forms meet.

    ``lives``, ``lived``, ``living`` and ``live`` all become ``liv``; ``studies`` and
    ``study`` become ``studi``; ``running`` and ``runs`` become ``run``.
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ies"):
        word = word[:-3] + "i"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        stem = word[: -len(suffix)]
        if word.endswith(suffix) and len(stem) >= 3 and _VOWELS & set(stem):
            word = stem
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz" + "aeiou":
                word = word[:-1]
            break
    if word.endswith("y") and len(word) > 3 and word[-2] not in _VOWELS:
        word = word[:-1] + "i"
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Terms of ``text`` (see module docstring)."""
    out: list[str] = []
    for run in _WORD_RE.findall(text.lower()):
        if _CJK_RE.match(run):
            out.extend(run)
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
        elif run not in STOPWORDS:
            out.append(_stem(run))
    return out


@dataclass(frozen=True)
class RankerDoc:
    key: str
    name: str
    description: str
    body: str


def doc_terms(doc: RankerDoc, field_weight: int = 2) -> tuple[Counter[str], int]:
    """Term counts and length of one document (name and description weighted)."""
    terms = tokenize(f"{doc.name}\n{doc.description}") * field_weight + tokenize(doc.body)
    return Counter(terms), len(terms)


class BM25Ranker:
    """Okapi BM25 (k1=1.2, b=0.75) over an inverted index.

    Args:
        docs: ``(key, name, description, body)`` tuples or :class:`RankerDoc`.
        field_weight: how many times name and description count relative to the body.
        prepared: documents already turned into ``(key, term counts, length)`` by
            :func:`doc_terms` (they follow ``docs``); lets a caller cache them per file.
    """

    def __init__(
        self,
        docs: Iterable[RankerDoc | tuple[str, str, str, str]],
        *,
        field_weight: int = 2,
        k1: float = 1.2,
        b: float = 0.75,
        prepared: Iterable[tuple[str, Counter[str], int]] = (),
    ) -> None:
        self.k1 = k1
        self.b = b
        self.keys: list[str] = []
        self._lengths: list[int] = []
        self._postings: dict[str, list[tuple[int, int]]] = {}
        items = [
            (d.key, *doc_terms(d, field_weight))
            for d in (doc if isinstance(doc, RankerDoc) else RankerDoc(*doc) for doc in docs)
        ]
        for i, (key, counts, length) in enumerate([*items, *prepared]):
            self.keys.append(key)
            self._lengths.append(length)
            for term, tf in counts.items():
                self._postings.setdefault(term, []).append((i, tf))
        n = len(self.keys)
        self._avg_len = (sum(self._lengths) / n) if n else 0.0
        self._idf = {
            t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self._postings.items()
        }
        avg = self._avg_len or 1.0
        # the length normalisation of each document, computed once instead of per query term
        self._norm = [k1 * (1 - b + b * length / avg) for length in self._lengths]

    def __len__(self) -> int:
        return len(self.keys)

    def scores(self, query: str) -> dict[int, float]:
        """Score of every document sharing at least one term with ``query``."""
        acc: dict[int, float] = {}
        k1p1, norms, get = self.k1 + 1, self._norm, acc.get
        for term in set(tokenize(query)):
            postings = self._postings.get(term)
            if not postings:
                continue
            idf = self._idf[term] * k1p1
            for i, tf in postings:
                acc[i] = get(i, 0.0) + idf * tf / (tf + norms[i])
        return acc

    def search(self, query: str, k: int = 10, *, min_score: float = 0.0) -> list[tuple[str, float]]:
        """The ``k`` best ``(key, score)`` pairs, best first; only scores above ``min_score``."""
        scored = heapq.nsmallest(k, self.scores(query).items(), key=lambda kv: (-kv[1], kv[0]))
        return [(self.keys[i], s) for i, s in scored if s > min_score]
