"""The in-process lexical index of :class:`~mnemoscope.memory.LocalLongTermMemory`.

One index per user, built from ``ltm_memories`` on first search and kept in step with the
store through ``ltm_history`` (every write appends to it): new rows are added as a small
segment, any other change rebuilds. Scoring is BM25F (Robertson et al., 2004): each field
(the memory's text, its neighbouring turns, its speaker, its date words) is length
normalised on its own, then the weighted term frequencies are saturated once. FTS5's
``bm25()`` normalises by the whole row instead, so that long neighbouring turns push a
short answer down, and fixes ``b`` at 0.75; the FTS5 index stays the fallback when numpy
is missing.

Besides the postings the index keeps, per row, what time-aware and entity-aware scoring
use: the speaker, ``occurred_at`` and whether the text names a time.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mnemoscope.memory._ltm_index import numpy
from mnemoscope.memory._ltm_text import FAR_CONTEXT, index_terms, names_time

FIELDS = ("content", "context", "speaker", "time", "far_context")
"""The indexed fields, in the order of the per-field arrays. ``context`` holds the turn
next to the memory on each side, ``far_context`` the ones further away (the stored context
split at :data:`~mnemoscope.memory._ltm_text.FAR_CONTEXT`)."""

MAX_SEGMENTS = 8
"""Appended segments kept before the index is rebuilt as one."""

_SELECT = (
    "SELECT rid, agent_id, run_id, status, expires_at, content, context, speaker, occurred_at, "
    "id FROM ltm_memories "
)
_ROWS = _SELECT + "WHERE user_id = ? AND rid > ? ORDER BY rid"

REBUILD_SHARE = 0.1
"""Rebuild once this share of the indexed rows are stale (deleted or re-indexed)."""


def history_mark(conn: sqlite3.Connection, user_id: str) -> tuple[int, int]:
    """The user's oldest and newest ``ltm_history`` entries ((0, 0) when none).

    The newest changes on every write; the oldest when the history is cut
    (``erase_user``), which a later write would otherwise hide.
    """
    sql = "SELECT seq FROM ltm_history WHERE user_id = ? ORDER BY seq {} LIMIT 1"
    last = conn.execute(sql.format("DESC"), (user_id,)).fetchone()
    if last is None:
        return (0, 0)
    first = conn.execute(sql.format("ASC"), (user_id,)).fetchone()
    return (int(first[0]), int(last[0]))


@dataclass
class _Segment:
    """Postings of a run of rows, term-major: ``starts[t]:starts[t+1]`` are term ``t``'s."""

    starts: Any  # int64 (terms + 1,)
    docs: Any  # int32, row index in the whole index
    fields: Any  # int8
    counts: Any  # float32
    raw: tuple[Any, Any, Any]  # (docs, fields, terms) of every token, to merge segments


@dataclass
class Lexicon:
    """Every row of one user, tokenised, with the columns retrieval masks and boosts by."""

    mark: tuple[int, int]
    last_rid: int
    terms: dict[str, int]
    speakers: dict[str, int]  # speaker name as stored -> speaker id
    speaker_terms: dict[str, set[int]]  # stemmed name word -> speaker ids
    rids: Any  # int64 (n,)
    ids: list[str]
    present: Any  # bool (n,): False once the row is deleted or indexed again (updated)
    agent_ids: list[str | None]
    run_ids: list[str | None]
    active: Any  # bool (n,)
    expires: Any  # float64, +inf when never
    occurred: Any  # float64 POSIX seconds, nan when unknown
    speaker_ids: Any  # int32, -1 when none
    timed: Any  # bool: the text names a time ("yesterday", "in May", "2022")
    lengths: Any  # float32 (n, fields)
    years: Any  # int32, year of occurred_at (0 when unknown)
    months: Any  # int32, month of occurred_at, 1-12 (0 when unknown)
    segments: list[_Segment] = field(default_factory=list)
    _scope: dict[tuple[str | None, str | None], Any] = field(default_factory=dict)
    _norms: dict[tuple[float, ...], Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(self.rids.shape[0])

    def stale(self) -> int:
        return int(self.size - self.present.sum())

    def postings(self, term: int) -> list[tuple[Any, Any, Any]]:
        out = []
        for s in self.segments:
            if term + 1 < s.starts.shape[0]:
                a, b = int(s.starts[term]), int(s.starts[term + 1])
                if b > a:
                    out.append((s.docs[a:b], s.fields[a:b], s.counts[a:b]))
        return out

    def norms(self, b: tuple[float, ...]) -> Any:
        """BM25's length normalisation per row and field, ``1 - b + b * len / mean len``."""
        got = self._norms.get(b)
        if got is None:
            np = numpy()
            live = self.lengths[self.present].astype(np.float64)
            mean = live.mean(axis=0) if live.shape[0] else np.ones(len(FIELDS))
            rel = self.lengths / np.where(mean > 0, mean, 1.0)
            bs = np.asarray(b, dtype=np.float64)
            got = self._norms[b] = np.maximum((1.0 - bs) + bs * rel, 1e-3).astype(np.float32)
        return got

    def scope_mask(self, agent_id: str | None, run_id: str | None) -> Any:
        """Rows of the agent/run (``None`` = any), cached: the index is rebuilt on change."""
        key = (agent_id, run_id)
        mask = self._scope.get(key)
        if mask is None:
            np = numpy()
            keep = np.ones(self.size, dtype=bool)
            if agent_id is not None:
                keep &= np.array([a == agent_id for a in self.agent_ids], dtype=bool)
            if run_id is not None:
                keep &= np.array([r == run_id for r in self.run_ids], dtype=bool)
            mask = self._scope[key] = keep
        return mask


def _seconds(iso: str | None) -> float:
    if not iso:
        return float("nan")
    return datetime.fromisoformat(iso).timestamp()


def _periods(rows: list[tuple[Any, ...]]) -> tuple[Any, Any]:
    """(years, months) of the rows' ``occurred_at`` (ISO text: "2023-05-08T...")."""
    np = numpy()
    years = np.array([int(r[8][:4]) if r[8] else 0 for r in rows], dtype=np.int32)
    months = np.array([int(r[8][5:7]) if r[8] else 0 for r in rows], dtype=np.int32)
    return years, months


def _tokenise(
    rows: list[tuple[Any, ...]],
    first_doc: int,
    terms: dict[str, int],
    speakers: dict[str, int],
    speaker_terms: dict[str, set[int]],
) -> tuple[Any, Any, Any, Any, Any, Any]:
    """(docs, fields, terms, lengths, speaker ids, timed) of ``rows``; grows the vocabularies."""
    np = numpy()
    from mnemoscope.memory._ltm_text import date_text

    for row in rows:
        name = row[7]
        if name and name not in speakers:
            sid = speakers[name] = len(speakers)
            for word in index_terms(name):
                speaker_terms.setdefault(word, set()).add(sid)
    cache: dict[str, list[int]] = {}

    def ids(text: str) -> list[int]:
        got = cache.get(text)
        if got is None:
            got = cache[text] = [terms.setdefault(t, len(terms)) for t in index_terms(text)]
        return got

    docs: list[int] = []
    kinds: list[int] = []
    toks: list[int] = []
    lengths = np.zeros((len(rows), len(FIELDS)), dtype=np.float32)
    sids = np.full(len(rows), -1, dtype=np.int32)
    timed = np.zeros(len(rows), dtype=bool)
    for i, row in enumerate(rows):
        content, context, speaker, occurred = row[5], row[6], row[7], row[8]
        near, _, far = context.partition(FAR_CONTEXT) if context else ("", "", "")
        when = datetime.fromisoformat(occurred) if occurred else None
        per_field = (
            ids(content),
            _context_ids(near, ids, speakers),
            ids(speaker) if speaker else [],
            ids(date_text(when)),
            _context_ids(far, ids, speakers),
        )
        doc = first_doc + i
        for f, values in enumerate(per_field):
            lengths[i, f] = len(values)
            docs.extend([doc] * len(values))
            kinds.extend([f] * len(values))
            toks.extend(values)
        sids[i] = speakers.get(speaker, -1) if speaker else -1
        timed[i] = names_time(content)
    return (
        np.asarray(docs, dtype=np.int32),
        np.asarray(kinds, dtype=np.int8),
        np.asarray(toks, dtype=np.int32),
        lengths,
        sids,
        timed,
    )


def _context_ids(
    context: str, ids: Callable[[str], list[int]], speakers: dict[str, int]
) -> list[int]:
    """The term ids of context lines, each ``"<speaker>: <text>"``, without the speaker:
    a name on every line would match every question about that person."""
    out: list[int] = []
    for line in context.split("\n") if context else ():
        head, sep, rest = line.partition(": ")
        out.extend(ids(rest if sep and head in speakers else line))
    return out


def _segment(docs: Any, kinds: Any, toks: Any, n_terms: int) -> _Segment:
    np = numpy()
    n_fields = len(FIELDS)
    if docs.shape[0] == 0:
        zero = np.zeros(0, dtype=np.int32)
        return _Segment(
            np.zeros(n_terms + 1, dtype=np.int64),
            zero,
            zero.astype(np.int8),
            zero.astype(np.float32),
            (docs, kinds, toks),
        )
    span = int(docs.max()) + 1
    key = (toks.astype(np.int64) * span + docs) * n_fields + kinds
    uniq, counts = np.unique(key, return_counts=True)
    p_terms = uniq // (span * n_fields)
    rest = uniq % (span * n_fields)
    p_docs = (rest // n_fields).astype(np.int32)
    p_fields = (rest % n_fields).astype(np.int8)
    starts = np.searchsorted(p_terms, np.arange(n_terms + 1)).astype(np.int64)
    return _Segment(starts, p_docs, p_fields, counts.astype(np.float32), (docs, kinds, toks))


def _empty(mark: tuple[int, int]) -> Lexicon:
    np = numpy()
    return Lexicon(
        mark=mark,
        last_rid=-1,
        terms={},
        speakers={},
        speaker_terms={},
        rids=np.zeros(0, dtype=np.int64),
        ids=[],
        present=np.zeros(0, dtype=bool),
        agent_ids=[],
        run_ids=[],
        active=np.zeros(0, dtype=bool),
        expires=np.zeros(0, dtype=np.float64),
        occurred=np.zeros(0, dtype=np.float64),
        speaker_ids=np.zeros(0, dtype=np.int32),
        timed=np.zeros(0, dtype=bool),
        lengths=np.zeros((0, len(FIELDS)), dtype=np.float32),
        years=np.zeros(0, dtype=np.int32),
        months=np.zeros(0, dtype=np.int32),
        segments=[],
    )


def _appended(lexicon: Lexicon, rows: list[tuple[Any, ...]], mark: tuple[int, int]) -> Lexicon:
    """A new index: ``lexicon``'s rows, then ``rows`` as one more segment."""
    np = numpy()
    if not rows:
        lexicon.mark = mark
        return lexicon
    terms, speakers, speaker_terms = lexicon.terms, lexicon.speakers, lexicon.speaker_terms
    docs, kinds, toks, lengths, sids, timed = _tokenise(
        rows, lexicon.size, terms, speakers, speaker_terms
    )
    years, months = _periods(rows)
    segments = [*lexicon.segments, _segment(docs, kinds, toks, len(terms))]
    if len(segments) > MAX_SEGMENTS:
        merged = [np.concatenate([s.raw[i] for s in segments]) for i in range(3)]
        segments = [_segment(merged[0], merged[1], merged[2], len(terms))]
    n = len(rows)
    return Lexicon(
        mark=mark,
        last_rid=max(lexicon.last_rid, int(max(r[0] for r in rows))),
        terms=terms,
        speakers=speakers,
        speaker_terms=speaker_terms,
        rids=np.concatenate([lexicon.rids, np.array([r[0] for r in rows], dtype=np.int64)]),
        ids=[*lexicon.ids, *(r[9] for r in rows)],
        present=np.concatenate([lexicon.present, np.ones(n, dtype=bool)]),
        agent_ids=[*lexicon.agent_ids, *(r[1] for r in rows)],
        run_ids=[*lexicon.run_ids, *(r[2] for r in rows)],
        active=np.concatenate([lexicon.active, np.array([r[3] == "active" for r in rows])]),
        expires=np.concatenate(
            [lexicon.expires, np.array([np.inf if r[4] is None else r[4] for r in rows])]
        ),
        occurred=np.concatenate([lexicon.occurred, np.array([_seconds(r[8]) for r in rows])]),
        speaker_ids=np.concatenate([lexicon.speaker_ids, sids]),
        timed=np.concatenate([lexicon.timed, timed]),
        lengths=np.concatenate([lexicon.lengths, lengths]),
        years=np.concatenate([lexicon.years, years]),
        months=np.concatenate([lexicon.months, months]),
        segments=segments,
    )


def build(conn: sqlite3.Connection, user_id: str, mark: tuple[int, int]) -> Lexicon:
    """The user's whole index."""
    return _appended(_empty(mark), conn.execute(_ROWS, (user_id, -1)).fetchall(), mark)


def refresh(conn: sqlite3.Connection, user_id: str, lexicon: Lexicon | None) -> Lexicon:
    """``lexicon`` if still current, else brought up to date from ``ltm_history``.

    New rows are appended as a segment; a superseded row is marked inactive, a deleted one
    absent, an updated one absent and appended again; the index is rebuilt when stale rows
    pass :data:`REBUILD_SHARE` or the history was cut (``erase_user``).
    """
    mark = history_mark(conn, user_id)
    if lexicon is not None and lexicon.mark == mark:
        return lexicon
    if lexicon is None or mark[0] != lexicon.mark[0] or mark[1] < lexicon.mark[1]:
        return build(conn, user_id, mark)
    events = conn.execute(
        "SELECT memory_id, event FROM ltm_history WHERE user_id = ? AND seq > ?",
        (user_id, lexicon.mark[1]),
    ).fetchall()
    changed = {mid for mid, event in events if event != "add"}
    updated = {mid for mid, event in events if event == "update"}
    if len(changed) + lexicon.stale() > REBUILD_SHARE * max(lexicon.size, 100):
        return build(conn, user_id, mark)
    again: list[tuple[Any, ...]] = []
    if changed:
        marks = ",".join("?" * len(changed))
        current = {
            r[9]: r
            for r in conn.execute(f"{_SELECT} WHERE id IN ({marks})", list(changed)).fetchall()
        }
        for pos, mem_id in enumerate(lexicon.ids):
            if mem_id not in changed or not lexicon.present[pos]:
                continue
            row = current.get(mem_id)
            if row is None or mem_id in updated:
                lexicon.present[pos] = False
                lexicon._norms.clear()
            else:
                lexicon.active[pos] = row[3] == "active"
        again = [current[m] for m in updated if m in current and current[m][0] <= lexicon.last_rid]
    rows = conn.execute(_ROWS, (user_id, lexicon.last_rid)).fetchall()
    return _appended(lexicon, again + rows, mark)
