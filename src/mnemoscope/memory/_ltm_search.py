"""Retrieval of :class:`~mnemoscope.memory.LocalLongTermMemory` (a mixin).

BM25 over FTS5 and cosine over the in-process vector matrix, fused by weighted
reciprocal rank fusion; see the store's module docstring.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from typing import Literal, TypeVar

from mnemoscope.embedding._base import EmbeddingModelBase
from mnemoscope.errors import UserError
from mnemoscope.memory import _ltm_index as vec
from mnemoscope.memory._long_term_base import MemoryItem
from mnemoscope.memory._ltm_schema import COLUMNS, row_to_item, scope_clause
from mnemoscope.memory._ltm_text import fts_match, rrf

SearchMode = Literal["hybrid", "lexical", "dense"]
_T = TypeVar("_T")


class LocalLTMSearch:
    """``retrieve`` of :class:`LocalLongTermMemory`."""

    embedding_model: EmbeddingModelBase | None
    search_mode: SearchMode
    lexical_weight: float
    dense_weight: float
    rrf_k: float
    context_weight: float
    candidates: int

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        raise NotImplementedError

    async def _require_vectors(self) -> None:
        raise NotImplementedError

    def _matrix(self, conn: sqlite3.Connection, user_id: str) -> vec.UserMatrix | None:
        raise NotImplementedError

    async def retrieve(
        self,
        query: str,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = 5,
        threshold: float | None = None,
        mode: SearchMode | None = None,
        include_superseded: bool = False,
    ) -> list[MemoryItem]:
        """The memories most relevant to ``query``, best first, within the scope.

        ``agent_id``/``run_id`` of ``None`` match any agent/run of the user.

        Args:
            mode: override the store's ``search_mode`` for this call.
            threshold: drop results scoring below it. Scores are the cosine similarity in
                dense mode and the fused reciprocal-rank score scaled to (0, 1] otherwise
                (1.0 = first in every ranking).
            include_superseded: also return memories that newer ones replaced.
        """
        if not user_id:
            raise UserError("retrieve() needs a non-empty user_id")
        use = mode or self.search_mode
        if use not in ("hybrid", "lexical", "dense"):
            raise UserError(f"mode must be 'hybrid', 'lexical' or 'dense', got {use!r}")
        if self.embedding_model is None:
            if use == "dense":
                raise UserError("mode='dense' needs an embedding_model; pass one to the store")
            use = "lexical"
        if limit <= 0 or not query.strip():
            return []
        now_ts = time.time()
        depth = max(self.candidates, limit)

        def lexical(conn: sqlite3.Connection) -> list[int]:
            return self._lexical(
                conn, query, user_id, agent_id, run_id, now_ts, depth, include_superseded
            )

        def fuse(
            conn: sqlite3.Connection, lexical_rids: list[int], qvec: list[float] | None
        ) -> list[MemoryItem]:
            scope = (user_id, agent_id, run_id)
            return self._search(
                conn,
                lexical_rids,
                qvec,
                use,
                scope,
                now_ts,
                depth,
                limit,
                threshold,
                include_superseded,
            )

        if use == "lexical":
            return await self._run(lambda conn: fuse(conn, lexical(conn), None))
        assert self.embedding_model is not None
        await self._require_vectors()
        if use == "dense":
            qvec = await self.embedding_model.embed_one(query)
            return await self._run(lambda conn: fuse(conn, [], qvec))
        # hybrid: BM25 runs in SQLite (a worker thread) while the question is embedded
        lexical_rids, qvec = await asyncio.gather(
            self._run(lexical), self.embedding_model.embed_one(query)
        )
        return await self._run(lambda conn: fuse(conn, lexical_rids, qvec))

    def _search(
        self,
        conn: sqlite3.Connection,
        lexical: list[int],
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
        dense: list[int] = []
        cosine: dict[int, float] = {}
        if mode != "lexical" and qvec is not None:
            np = vec.numpy()
            matrix = self._matrix(conn, user_id)
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
                sims = matrix.vectors @ vec.unit(np.asarray(qvec, dtype=np.float32))
                sims[~mask] = -np.inf
                best = vec.top_k(sims, min(depth, int(mask.sum())))
                dense = [int(r) for r in matrix.rids[best]]
                cosine = dict(zip(dense, sims[best].tolist(), strict=True))
        if mode == "dense":
            ranked = [(rid, cosine[rid]) for rid in dense]
        else:
            weights = (self.lexical_weight, self.dense_weight if mode == "hybrid" else 0.0)
            top = sum(w for w, ranking in zip(weights, (lexical, dense), strict=True) if ranking)
            fused = rrf([(lexical, weights[0]), (dense, weights[1])], k=self.rrf_k)
            scale = (self.rrf_k + 1) / top if top else 1.0
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
    ) -> list[int]:
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
            f"'bm25(1.0, {float(self.context_weight)!r}, 1.0, 1.0)' AND {where} {status}"
            "AND (m.expires_at IS NULL OR m.expires_at > ?) ORDER BY ltm_fts.rank LIMIT ?",
            [match, *params, now_ts, depth],
        ).fetchall()
        return [r[0] for r in rows]
