"""Retrieval of :class:`~mnemoscope.memory.LocalLongTermMemory`: one part of the store.

Lexical: BM25F over the in-process index of :mod:`~mnemoscope.memory._ltm_lexicon` (the
FTS5 index's ``bm25()`` when numpy is missing), with three question-aware adjustments:

* **entities**: a word of the question that names a speaker of the scope ("What did
  Caroline paint?") is not a search term (it would match half the rows and every
  neighbouring-turn context); rows that speaker said are boosted instead;
* **"when" questions**: rows whose text places something in time ("yesterday", "last
  May", "in 2022") are boosted, since the answer is one of those;
* **named periods**: rows whose ``occurred_at`` falls in a month or year the question
  names ("in May 2023") are boosted (the date words are also an indexed field).

Dense: cosine over the in-process vector matrix. Fusion: weighted reciprocal rank fusion,
the lexical weight scaled by how much of the question's word weight (IDF) the best
lexical row covers, so that a lexical ranking led by a weak match (one common word) gives
way to the dense one. Every knob is a field of :class:`RetrievalSettings`.
"""

from __future__ import annotations

import importlib.util
import math
import sqlite3
import time
from dataclasses import dataclass
from typing import Literal, Protocol

from mnemoscope.errors import UserError
from mnemoscope.memory import _ltm_index as vec
from mnemoscope.memory import _ltm_lexicon as lx
from mnemoscope.memory._long_term_base import MemoryItem
from mnemoscope.memory._ltm_file import LtmFile
from mnemoscope.memory._ltm_schema import COLUMNS, row_to_item, scope_clause
from mnemoscope.memory._ltm_text import fts_match, rrf, search_terms, time_query

SearchMode = Literal["hybrid", "lexical", "dense"]
Fusion = Literal["rrf", "rrf-coverage"]
LexicalEngine = Literal["bm25f", "fts5"]

HAS_NUMPY = importlib.util.find_spec("numpy") is not None


@dataclass(frozen=True)
class RetrievalSettings:
    """Scoring knobs of the native store's retrieval (defaults chosen on LoCoMo's dev file).

    Attributes:
        k1: BM25 term-frequency saturation.
        b_content: BM25F length normalisation of the memory's own text.
        b_context: length normalisation of the neighbouring turns.
        speaker_weight: weight of the speaker field (names not handled as entities).
        time_weight: weight of the date words of ``occurred_at``.
        far_context_weight: weight of the neighbouring turns beyond the next one on each
            side (``context_window`` >= 2), relative to the next ones: a short reply such
            as "Yes." gathers the words of every turn around it, and at full weight they
            outrank the turn it answers.
        entity_boost: lexical score multiplier, minus one, for rows said by a speaker the
            question names.
        when_boost: the same for rows naming a time, on "when" questions.
        period_boost: the same for rows that occurred in a period the question names.
        fusion: ``"rrf"`` (fixed weights) or ``"rrf-coverage"`` (lexical weight scaled by
            the IDF share of the question the best lexical row matches).
        coverage_floor: the smallest share of the lexical weight ``"rrf-coverage"`` keeps.
        lexical_engine: ``"bm25f"`` (the in-process index) or ``"fts5"`` (FTS5's
            ``bm25()``, no boosts: what the store did before, and its fallback without
            numpy).
    """

    k1: float = 1.2
    b_content: float = 0.25
    b_context: float = 0.25
    speaker_weight: float = 1.0
    time_weight: float = 1.0
    far_context_weight: float = 0.5
    entity_boost: float = 0.5
    when_boost: float = 0.5
    period_boost: float = 0.5
    fusion: Fusion = "rrf"
    coverage_floor: float = 0.5
    lexical_engine: LexicalEngine = "bm25f"


DEFAULT_SETTINGS = RetrievalSettings()


@dataclass
class LexicalHits:
    """A lexical ranking and how much of the question its best row matched (0-1)."""

    rids: list[int]
    coverage: float = 1.0


class SearchKnobs(Protocol):
    """The store's settings a search reads (at each search, so assigning one applies)."""

    search_mode: SearchMode
    lexical_weight: float
    dense_weight: float
    rrf_k: float
    context_weight: float
    candidates: int
    retrieval: RetrievalSettings


Scope = tuple[str, str | None, str | None]
"""``(user_id, agent_id, run_id)``; ``None`` matches any agent or run of the user."""


class LtmSearch:
    """``retrieve``: the lexical and dense rankings of a scope, fused.

    Args:
        file: the store's file part (connection, vector matrices, lexical indexes).
        knobs: where the ranking settings are read (the store itself).
    """

    def __init__(self, file: LtmFile, knobs: SearchKnobs) -> None:
        self._file = file
        self._knobs = knobs

    async def retrieve(
        self,
        query: str,
        scope: Scope,
        *,
        limit: int,
        threshold: float | None,
        mode: SearchMode | None,
        include_superseded: bool,
    ) -> list[MemoryItem]:
        """:meth:`LocalLongTermMemory.retrieve <mnemoscope.memory.LocalLongTermMemory.retrieve>`
        in ``scope``."""
        user_id, agent_id, run_id = scope
        knobs, file = self._knobs, self._file
        if not user_id:
            raise UserError("retrieve() needs a non-empty user_id")
        use = mode or knobs.search_mode
        if use not in ("hybrid", "lexical", "dense"):
            raise UserError(f"mode must be 'hybrid', 'lexical' or 'dense', got {use!r}")
        if file.embedding_model is None:
            if use == "dense":
                raise UserError("mode='dense' needs an embedding_model; pass one to the store")
            use = "lexical"
        if limit <= 0 or not query.strip():
            return []
        now_ts = time.time()
        depth = max(knobs.candidates, limit)

        def lexical(conn: sqlite3.Connection) -> LexicalHits:
            return self._lexical(
                conn, query, user_id, agent_id, run_id, now_ts, depth, include_superseded
            )

        def fuse(
            conn: sqlite3.Connection, hits: LexicalHits, qvec: list[float] | None
        ) -> list[MemoryItem]:
            return self._search(
                conn, hits, qvec, use, scope, now_ts, depth, limit, threshold, include_superseded
            )

        qvec: list[float] | None = None
        if use != "lexical":
            assert file.embedding_model is not None
            await file.require_vectors()
            qvec = await file.embedding_model.embed_one(query)
        # one worker-thread hop for BM25, cosine and fusion: on a busy machine every hop
        # can wait for a core, which costs more than running BM25 beside the embedding
        return await file.run(
            lambda conn: fuse(conn, lexical(conn) if use != "dense" else LexicalHits([]), qvec)
        )

    def _search(
        self,
        conn: sqlite3.Connection,
        hits: LexicalHits,
        qvec: list[float] | None,
        mode: SearchMode,
        scope: tuple[str, str | None, str | None],
        now_ts: float,
        depth: int,
        limit: int,
        threshold: float | None,
        include_superseded: bool,
    ) -> list[MemoryItem]:
        user_id, agent_id, run_id = scope
        lexical = hits.rids
        dense: list[int] = []
        cosine: dict[int, float] = {}
        if mode != "lexical" and qvec is not None:
            np = vec.numpy()
            matrix = self._file.matrix(conn, user_id)
            assert matrix is not None
            if matrix.rids.shape[0]:
                mask = matrix.mask(
                    agent_id=agent_id,
                    run_id=run_id,
                    now=now_ts,
                    include_superseded=include_superseded,
                )
                # one product over the whole matrix (no copy of the rows in scope), then
                # the rows out of scope are pushed below every cosine
                sims = vec.cosines(matrix.vectors, np.asarray(qvec, dtype=np.float32))
                sims[~mask] = -np.inf
                best = vec.top_k(sims, min(depth, int(mask.sum())))
                dense = [int(r) for r in matrix.rids[best]]
                cosine = dict(zip(dense, sims[best].tolist(), strict=True))
        if mode == "dense":
            ranked = [(rid, cosine[rid]) for rid in dense]
        else:
            lexical_weight = self._knobs.lexical_weight
            if self._knobs.retrieval.fusion == "rrf-coverage" and dense:
                floor = self._knobs.retrieval.coverage_floor
                lexical_weight *= floor + (1.0 - floor) * hits.coverage
            weights = (lexical_weight, self._knobs.dense_weight if mode == "hybrid" else 0.0)
            top = sum(w for w, ranking in zip(weights, (lexical, dense), strict=True) if ranking)
            fused = rrf([(lexical, weights[0]), (dense, weights[1])], k=self._knobs.rrf_k)
            scale = (self._knobs.rrf_k + 1) / top if top else 1.0
            ranked = [(rid, score * scale) for rid, score in fused]
        if threshold is not None:
            ranked = [(rid, s) for rid, s in ranked if s >= threshold]
        ranked = ranked[:limit]
        if not ranked:
            return []
        marks = ",".join("?" * len(ranked))
        # status and expiry again: in hybrid mode BM25 ran in an earlier call (a write
        # may have superseded or deleted a row since)
        status = "" if include_superseded else "AND m.status = 'active' "
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM ltm_memories m WHERE m.rid IN ({marks}) {status}"
            "AND (m.expires_at IS NULL OR m.expires_at > ?)",
            [*(rid for rid, _ in ranked), now_ts],
        ).fetchall()
        by_rid = {row[0]: row for row in rows}
        return [row_to_item(by_rid[rid], score) for rid, score in ranked if rid in by_rid]

    def _lexical(
        self,
        conn: sqlite3.Connection,
        query: str,
        user_id: str,
        agent_id: str | None,
        run_id: str | None,
        now_ts: float,
        depth: int,
        include_superseded: bool,
    ) -> LexicalHits:
        if not HAS_NUMPY or self._knobs.retrieval.lexical_engine == "fts5":
            return LexicalHits(
                self._lexical_fts(
                    conn, query, user_id, agent_id, run_id, now_ts, depth, include_superseded
                )
            )
        cache = self._file.lexicons
        lexicon = cache[user_id] = lx.refresh(conn, user_id, cache.get(user_id))
        return score_lexical(
            lexicon,
            query,
            self._knobs.retrieval,
            context_weight=self._knobs.context_weight,
            agent_id=agent_id,
            run_id=run_id,
            now=now_ts,
            depth=depth,
            include_superseded=include_superseded,
        )

    def _lexical_fts(
        self,
        conn: sqlite3.Connection,
        query: str,
        user_id: str,
        agent_id: str | None,
        run_id: str | None,
        now_ts: float,
        depth: int,
        include_superseded: bool,
    ) -> list[int]:
        """BM25 by FTS5 itself: the lexical ranking when numpy is not installed."""
        match = fts_match(query)
        if match is None:
            return []
        where, params = scope_clause(user_id, agent_id, run_id)
        status = "" if include_superseded else "AND m.status = 'active' "
        # ``ORDER BY rank`` with the weights in a ``rank MATCH`` constraint lets FTS5 sort
        # by BM25 itself: SQLite then joins rows in rank order and stops at ``depth`` rows
        # in scope, instead of joining every match before sorting
        rows = conn.execute(
            "SELECT m.rid FROM ltm_fts CROSS JOIN ltm_memories m ON m.rid = ltm_fts.rowid "
            "WHERE ltm_fts MATCH ? AND ltm_fts.rank MATCH "
            f"'bm25(1.0, {float(self._knobs.context_weight)!r}, 1.0, 1.0)' AND {where} {status}"
            "AND (m.expires_at IS NULL OR m.expires_at > ?) ORDER BY ltm_fts.rank LIMIT ?",
            [match, *params, now_ts, depth],
        ).fetchall()
        return [r[0] for r in rows]


def score_lexical(
    lexicon: lx.Lexicon,
    query: str,
    settings: RetrievalSettings,
    *,
    context_weight: float,
    agent_id: str | None,
    run_id: str | None,
    now: float,
    depth: int,
    include_superseded: bool = False,
) -> LexicalHits:
    """BM25F of the question over ``lexicon``'s rows in scope, with the boosts, best first."""
    np = vec.numpy()
    n = lexicon.size
    terms = search_terms(query)
    if n == 0 or not terms:
        return LexicalHits([])
    names = [t for t in terms if t in lexicon.speaker_terms]
    words = [t for t in terms if t not in lexicon.speaker_terms] or terms
    far = context_weight * settings.far_context_weight
    weights = np.array(
        [1.0, context_weight, settings.speaker_weight, settings.time_weight, far],
        dtype=np.float32,
    )
    b_context = settings.b_context
    norm = lexicon.norms((settings.b_content, b_context, 0.0, 0.0, b_context))
    scores = np.zeros(n, dtype=np.float32)
    matched = np.zeros(n, dtype=np.float32)
    present = lexicon.present
    live = int(present.sum())
    total_idf = 0.0
    k1 = settings.k1
    for word in words:
        tid = lexicon.terms.get(word)
        postings = lexicon.postings(tid) if tid is not None else []
        tf = np.zeros(n, dtype=np.float32)
        for docs, fields, counts in postings:
            contrib = weights[fields] * counts / norm[docs, fields]
            tf += np.bincount(docs, weights=contrib, minlength=n).astype(np.float32)
        # document frequency over the rows still indexed (not deleted or re-indexed)
        df = int(np.count_nonzero(tf[present])) if postings else 0
        idf = math.log(1.0 + (live - df + 0.5) / (df + 0.5))
        total_idf += idf
        if df:
            scores += idf * tf * (k1 + 1.0) / (tf + k1)
            matched += idf * (tf > 0)
    keep = lexicon.present & (lexicon.expires > now)
    if not include_superseded:
        keep &= lexicon.active
    keep &= lexicon.scope_mask(agent_id, run_id)
    keep &= scores > 0
    if not keep.any():
        return LexicalHits([])
    boost = np.ones(n, dtype=np.float32)
    if names and len(words) < len(terms) and settings.entity_boost:
        named = [sid for t in names for sid in lexicon.speaker_terms[t]]
        boost[np.isin(lexicon.speaker_ids, named)] += settings.entity_boost
    when = time_query(query)
    if when.asks_when and settings.when_boost:
        boost[lexicon.timed] += settings.when_boost
    if (when.year or when.month) and settings.period_boost:
        inside = np.ones(n, dtype=bool)
        if when.year:
            inside &= lexicon.years == when.year
        if when.month:
            inside &= lexicon.months == when.month
        boost[inside] += settings.period_boost
    scores *= boost
    scores[~keep] = -np.inf
    best = vec.top_k(scores, min(depth, int(keep.sum())), tie=lexicon.rids)
    coverage = float(matched[best[0]]) / total_idf if total_idf > 0 else 1.0
    return LexicalHits([int(r) for r in lexicon.rids[best]], min(1.0, coverage))
