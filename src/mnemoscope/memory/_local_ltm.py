"""A native long-term memory in one SQLite file: BM25 + dense vectors, fused, offline.

Example::

    from mnemoscope.memory import LocalLongTermMemory
    from mnemoscope.testing import HashEmbeddingModel

    async with LocalLongTermMemory(":memory:", embedding_model=HashEmbeddingModel()) as ltm:
        await ltm.record("Alice prefers dark mode in every app.", user_id="alice")
        hits = await ltm.retrieve("which theme does she like?", user_id="alice")

How it works:

* **Storage.** One SQLite file (WAL, ``busy_timeout``) holds the memories, an FTS5 index
  and an append-only history (see :mod:`mnemoscope.memory._ltm_schema`). Every write is
  one transaction, so a process killed mid-write leaves the file as it was before it.
  SQLite calls run in a worker thread; the event loop is never blocked.
* **Retrieval.** Lexical: BM25F over an in-process index (FTS5 ``bm25()`` without numpy),
  with speaker, "when" and named-period boosts, over the memory, its speaker, its date and
  (at a lower weight) the neighbouring turns it was recorded with; the question's stopwords are
  dropped and its words OR-ed. Dense: cosine over float32 vectors from any
  :class:`~mnemoscope.embedding.EmbeddingModelBase`, brute force over an in-process
  matrix per user. Both rankings are fused by weighted reciprocal rank fusion. Without
  an embedding model the store is lexical-only.
* **Writing.** ``infer=False`` stores texts as given; ``infer=True`` asks the chat model
  once for standalone facts and for the stored memories each one supersedes (those are
  kept, marked ``superseded``, and no longer retrieved). Exact duplicates (normalised
  hash) and near duplicates (cosine >= ``near_duplicate_threshold``) are skipped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from mnemoscope.embedding import EmbeddingModelBase
from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory import _ltm_index as vec
from mnemoscope.memory._long_term_base import (
    LongTermMemoryBase,
    MemoryItem,
    RecordEvent,
    RecordInput,
    RecordResult,
)
from mnemoscope.memory._ltm_infer import ExtractedFacts, build_infer_messages
from mnemoscope.memory._ltm_manage import LocalLTMManagement
from mnemoscope.memory._ltm_open import connect, store_error
from mnemoscope.memory._ltm_schema import (
    COLUMNS,
    Pending,
    StoredMemoryItem,
    embed_text,
    log_event,
    row_to_item,
    scope_clause,
    transaction,
    utcnow,
)
from mnemoscope.memory._ltm_search import LocalLTMSearch, SearchMode
from mnemoscope.memory._ltm_text import (
    content_hash,
    date_text,
    parse_when,
)
from mnemoscope.message import Msg
from mnemoscope.model import ChatModelBase

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


def _seconds(ttl: timedelta | float | None, name: str) -> float | None:
    if ttl is None:
        return None
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if seconds <= 0:
        raise UserError(f"{name} must be a positive duration (seconds or timedelta), got {ttl!r}")
    return seconds


class LocalLongTermMemory(LocalLTMSearch, LocalLTMManagement, LongTermMemoryBase):
    """Embedded hybrid long-term memory (SQLite FTS5 + dense vectors), no server.

    Args:
        path: the SQLite file (created when missing unless ``create=False`` or
            ``read_only=True``), or ``":memory:"`` for a private in-process store.
        embedding_model: any embedder; ``None`` runs lexical-only (logged once).
        chat_model: the model ``infer=True`` asks for facts; required for inference.
        infer: the default of ``record(..., infer=None)``.
        search_mode: ``"hybrid"`` (default), ``"lexical"`` or ``"dense"``.
        lexical_weight: weight of the BM25 ranking in the fusion.
        dense_weight: weight of the vector ranking in the fusion.
        rrf_k: the reciprocal-rank-fusion constant (smaller favours the top ranks).
        context_weight: BM25 weight of the neighbouring turns relative to the memory's own
            text (0 ignores them).
        context_window: how many neighbouring messages on each side of a message, within
            one ``record`` call, are indexed with it (0 disables). 2 scores best on LoCoMo
            (docs/long-term-memory.md quotes its figures) but lets a short reply such as
            "Yes." outrank the turn it answers, so the default stays 1. Applies to what is
            recorded from then on; rows already stored keep their neighbours.
        candidates: how many rows each ranking contributes to the fusion.
        dedup: skip exact duplicates (same normalised text in the same scope).
        near_duplicate_threshold: skip a new memory whose cosine to an active one in the
            same scope is at least this; ``None`` disables (needs an embedding model).
        ttl: default lifetime of new memories (seconds or ``timedelta``); ``None`` keeps
            them until deleted.
        infer_related: how many related stored memories the extraction call is shown.
        busy_timeout: seconds a write waits for another process's write to finish.
        read_only: open the file with SQLite's ``mode=ro``: nothing is ever written (not
            even the schema), writes raise :class:`~mnemoscope.errors.UserError`, and a
            file without a store raises ``MemoryStoreError`` ("no long-term store in ...").
            For inspection (``mnemoscope ltm ls``).
        create: create the file and the store's tables when they are missing (default).
            ``False`` requires an existing store, as ``read_only`` does, but allows writes.

    Raises:
        MemoryStoreError: on first use, when the file is not a SQLite database, is damaged
            (it is left unchanged), is locked, or holds no store (``read_only``/``create``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = "mnemoscope_ltm.db",
        *,
        embedding_model: EmbeddingModelBase | None = None,
        chat_model: ChatModelBase | None = None,
        infer: bool = False,
        search_mode: SearchMode = "hybrid",
        lexical_weight: float = 1.0,
        dense_weight: float = 0.5,
        rrf_k: float = 20.0,
        context_weight: float = 0.5,
        context_window: int = 1,
        candidates: int = 100,
        dedup: bool = True,
        near_duplicate_threshold: float | None = 0.95,
        ttl: timedelta | float | None = None,
        infer_related: int = 10,
        busy_timeout: float = 30.0,
        read_only: bool = False,
        create: bool = True,
    ) -> None:
        if search_mode not in ("hybrid", "lexical", "dense"):
            raise UserError(
                f"search_mode must be 'hybrid', 'lexical' or 'dense', got {search_mode!r}"
            )
        if search_mode == "dense" and embedding_model is None:
            raise UserError("search_mode='dense' needs an embedding_model; pass one")
        for name, value in (
            ("lexical_weight", lexical_weight),
            ("dense_weight", dense_weight),
            ("context_weight", context_weight),
        ):
            if value < 0:
                raise UserError(f"{name} must be >= 0, got {value}")
        if rrf_k < 0 or candidates < 1 or context_window < 0 or infer_related < 0:
            raise UserError(
                "rrf_k, context_window and infer_related must be >= 0 and candidates >= 1"
            )
        if near_duplicate_threshold is not None and not 0 < near_duplicate_threshold <= 1:
            raise UserError(
                "near_duplicate_threshold must be in (0, 1] or None, "
                f"got {near_duplicate_threshold}"
            )
        if infer and chat_model is None:
            raise UserError("infer=True needs a chat_model to extract facts; pass chat_model=")
        self.path = os.fspath(path)
        if read_only and self.path == ":memory:":
            raise UserError("read_only=True needs a store file; ':memory:' is always empty")
        self.read_only = read_only
        self.create = create and not read_only
        self.embedding_model = embedding_model
        self.chat_model = chat_model
        self.infer = infer
        self.search_mode: SearchMode = search_mode
        self.lexical_weight = lexical_weight
        self.dense_weight = dense_weight
        self.rrf_k = rrf_k
        self.context_weight = context_weight
        self.context_window = context_window
        self.candidates = candidates
        self.dedup = dedup
        self.near_duplicate_threshold = near_duplicate_threshold
        self.ttl = _seconds(ttl, "ttl")
        self.infer_related = infer_related
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._data_version: int | None = None
        self._matrices: dict[str, vec.UserMatrix] = {}
        self._vector_mismatch: str | None = None
        if embedding_model is None:
            logger.info(
                "LocalLongTermMemory(%r) has no embedding_model: retrieval is lexical-only "
                "(BM25); pass one for hybrid search",
                self.path,
            )

    def __repr__(self) -> str:
        return (
            f"LocalLongTermMemory(path={self.path!r}, embedding_model={self.embedding_model!r}, "
            f"search_mode={self.search_mode!r})"
        )

    # ------------------------------------------------------------------ plumbing
    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise MemoryStoreError(f"LocalLongTermMemory({self.path!r}) is closed")
        if self._conn is not None:
            return self._conn
        conn = connect(
            self.path, read_only=self.read_only, create=self.create, busy_timeout=self.busy_timeout
        )
        try:
            self._vector_mismatch = self._check_vectors(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise store_error(self.path, exc) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _writable(self, operation: str) -> None:
        if self.read_only:
            raise UserError(
                f"LocalLongTermMemory({self.path!r}) was opened with read_only=True; "
                f"open it without read_only to {operation}"
            )

    def _check_vectors(self, conn: sqlite3.Connection) -> str | None:
        if self.embedding_model is None:
            return None
        meta = dict(conn.execute("SELECT key, value FROM ltm_meta").fetchall())
        stored_model, stored_dims = meta.get("embedding_model"), meta.get("dimensions")
        model = self.embedding_model
        if stored_dims is None:
            return None
        if int(stored_dims) != model.dimensions or stored_model != model.model:
            return (
                f"{self.path!r} holds {stored_dims}-dimensional vectors from "
                f"{stored_model!r}, but embedding_model is {model!r}; pass the same model, "
                "or call `await store.reembed()` once to re-embed every memory with this one "
                f"(from the shell: mnemoscope ltm reembed {self.path} --embedding local)"
            )
        return None

    def _locked(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._lock:
            try:
                conn = self._connect()
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != self._data_version:  # another connection committed
                    self._matrices.clear()
                    self._data_version = version
                return fn(conn)
            except sqlite3.Error as exc:
                raise store_error(self.path, exc, action="read") from exc

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        return await asyncio.to_thread(self._locked, fn)

    def _matrix(self, conn: sqlite3.Connection, user_id: str) -> vec.UserMatrix | None:
        if self.embedding_model is None:
            return None
        matrix = self._matrices.get(user_id)
        if matrix is None:
            matrix = vec.load_user_matrix(conn, user_id, self.embedding_model.dimensions)
            self._matrices[user_id] = matrix
        return matrix

    async def _require_vectors(self) -> None:
        if self._conn is None:  # the stored model is checked when the file is opened
            await self._run(lambda conn: None)
        if self._vector_mismatch is not None:
            raise UserError(self._vector_mismatch)

    # ------------------------------------------------------------------ writing
    async def record(
        self,
        content: RecordInput,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        infer: bool | None = None,
        metadata: dict[str, Any] | None = None,
        occurred_at: datetime | str | None = None,
        ttl: timedelta | float | None = None,
    ) -> RecordResult:
        """Store memories; see :meth:`LongTermMemoryBase.record`.

        Args:
            content: a text, a message, or a list of them; each becomes one memory
                (``infer=False``). Messages of one call are taken as a conversation: each is
                indexed with its ``context_window`` neighbours (so "Yes, in May" is found
                by the question it answers), its ``name`` is kept as the speaker and its
                ``metadata`` is merged over ``metadata``. Strings are independent facts.
            occurred_at: when what is recorded happened (else ``metadata["occurred_at"]``,
                else the message's timestamp). Indexed as words ("Monday 8 May 2023") and
                returned in ``metadata["occurred_at"]``.
            ttl: lifetime of these memories; defaults to the store's ``ttl``.

        Returns:
            An ``add`` event per new memory, an ``update`` event per new memory that
            supersedes older ones (``reason`` names them), a ``skip`` event per duplicate
            (its ``item`` is the memory it duplicates).
        """
        if not user_id:
            raise UserError("record() needs a non-empty user_id")
        self._writable("record memories")
        use_infer = self.infer if infer is None else infer
        if use_infer and self.chat_model is None:
            raise UserError(
                "record(infer=True) needs a chat_model; pass chat_model= to LocalLongTermMemory"
            )
        expiry = _seconds(ttl, "ttl") if ttl is not None else self.ttl
        base_meta = dict(metadata or {})
        when = parse_when(occurred_at) or parse_when(base_meta.get("occurred_at"))
        if occurred_at is not None and when is None:
            raise UserError(
                f"occurred_at must be a datetime or ISO-8601 string, got {occurred_at!r}"
            )
        pending = self._pending_from_input(content, base_meta, when)
        if use_infer and pending:
            pending = await self._infer(pending, user_id, agent_id, run_id, base_meta, when)
        if not pending:
            return RecordResult()
        if self.embedding_model is not None:
            await self._require_vectors()
            vectors = await self.embedding_model.embed([embed_text(p) for p in pending])
            for p, v in zip(pending, vectors, strict=True):
                p.vector = v
        events = await self._run(
            lambda conn: self._write(conn, pending, user_id, agent_id, run_id, expiry)
        )
        return RecordResult(events=events)

    def _pending_from_input(
        self, content: RecordInput, base_meta: dict[str, Any], when: datetime | None
    ) -> list[Pending]:
        raw = [content] if isinstance(content, str | Msg) else list(content)
        items: list[Pending] = []
        for entry in raw:
            if isinstance(entry, Msg):
                text = entry.get_text_content().strip()
                meta = {**base_meta, **entry.metadata}
                at = parse_when(entry.metadata.get("occurred_at")) or when or entry.timestamp
                items.append(Pending(text, entry.name or "", metadata=meta, occurred_at=at))
            elif isinstance(entry, str):
                items.append(Pending(entry.strip(), metadata=dict(base_meta), occurred_at=when))
            else:
                raise UserError(f"record() accepts str or Msg items, got {type(entry).__name__}")
        # Messages of one call are a conversation: index each with its neighbours. Plain
        # strings are independent facts (e.g. the add_memory tool's sentences): no context.
        w = self.context_window
        turns = [p if isinstance(e, Msg) else None for p, e in zip(items, raw, strict=True)]
        for i, p in enumerate(items):
            if turns[i] is None:
                continue
            around = turns[max(0, i - w) : i] + turns[i + 1 : i + 1 + w]
            p.context = "\n".join(embed_text(n) for n in around if n is not None and n.text)
        return [p for p in items if p.text]

    async def _infer(
        self,
        pending: list[Pending],
        user_id: str,
        agent_id: str | None,
        run_id: str | None,
        base_meta: dict[str, Any],
        when: datetime | None,
    ) -> list[Pending]:
        assert self.chat_model is not None
        related: list[MemoryItem] = []
        if self.infer_related:
            query = "\n".join(p.text for p in pending)
            related = await self.retrieve(
                query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=self.infer_related
            )
            # a correction often shares no word with what it corrects ("I moved to Berlin"
            # vs "lives in Paris"): fill the rest with the newest memories of the scope
            missing = self.infer_related - len(related)
            if missing > 0:
                seen = {item.id for item in related}
                where, params = scope_clause(user_id, agent_id, run_id)
                sql = (
                    f"SELECT {COLUMNS} FROM ltm_memories m WHERE {where} "
                    "AND m.status = 'active' AND (m.expires_at IS NULL OR m.expires_at > ?) "
                    "ORDER BY m.rid DESC LIMIT ?"
                )
                args = [*params, time.time(), self.infer_related]
                rows = await self._run(lambda conn: conn.execute(sql, args).fetchall())
                recent = [row_to_item(r) for r in rows if r[1] not in seen]
                related = [*related, *recent[:missing]]
        messages, aliases = build_infer_messages(
            [(p.speaker, p.text, p.occurred_at) for p in pending], related
        )
        extracted = await self.chat_model.generate_structured_output(messages, ExtractedFacts)
        known = set(aliases.values())
        stamp = when or max((p.occurred_at for p in pending if p.occurred_at), default=None)
        facts: list[Pending] = []
        for fact in extracted.facts:
            text = fact.text.strip()
            if not text:
                continue
            supersedes = [aliases.get(a.strip(), a.strip()) for a in fact.supersedes]
            facts.append(
                Pending(
                    text,
                    metadata={**base_meta, "inferred": True},
                    occurred_at=stamp,
                    supersedes=[s for s in dict.fromkeys(supersedes) if s in known],
                )
            )
        return facts

    def _write(
        self,
        conn: sqlite3.Connection,
        pending: list[Pending],
        user_id: str,
        agent_id: str | None,
        run_id: str | None,
        ttl: float | None,
    ) -> list[RecordEvent]:
        np_mod = vec.numpy() if self.embedding_model is not None else None
        near = self.near_duplicate_threshold if self.embedding_model is not None else None
        now = utcnow()
        now_iso, now_ts = now.isoformat(), now.timestamp()
        expires = now_ts + ttl if ttl is not None else None
        events: list[RecordEvent] = []
        new_rows: list[tuple[int, Any]] = []  # (rid, unit vector) to append to the cache
        superseded = False
        with transaction(conn):
            near_dups = None
            if near is not None and np_mod is not None and all(p.vector for p in pending):
                matrix = self._matrix(conn, user_id)
                assert matrix is not None
                mask = matrix.mask(agent_id=agent_id, run_id=run_id, now=now_ts, exact=True)
                units = vec.unit(np_mod.asarray([p.vector for p in pending], dtype=np_mod.float32))
                near_dups = vec.NearDuplicates(units, matrix.rids[mask], matrix.vectors[mask])
            seen: dict[str, StoredMemoryItem] = {}  # hash -> memory added by this write
            added: list[StoredMemoryItem | None] = []  # per pending row, when added
            for i, p in enumerate(pending):
                digest = content_hash(p.text)
                duplicate = self._find_duplicate(
                    conn, digest, user_id, agent_id, run_id, now_ts, seen
                )
                if duplicate is None and near is not None and near_dups is not None:
                    duplicate = self._find_near(conn, i, near, near_dups, added)
                added.append(None)
                if duplicate is not None:
                    events.append(RecordEvent(event="skip", item=duplicate[0], reason=duplicate[1]))
                    continue
                rid, item = self._insert(
                    conn, p, digest, user_id, agent_id, run_id, now_iso, expires
                )
                added[i] = seen[digest] = item
                reason = None
                if p.supersedes:
                    reason = self._supersede(conn, p.supersedes, item.id, user_id, now_iso)
                    superseded = superseded or reason is not None
                events.append(
                    RecordEvent(event="update" if reason else "add", item=item, reason=reason)
                )
                if p.vector is not None and np_mod is not None:
                    if near_dups is not None:
                        near_dups.accepted[i] = True
                        unit = near_dups.batch[i]
                    else:
                        unit = vec.unit(np_mod.asarray(p.vector, dtype=np_mod.float32))
                    new_rows.append((rid, unit))
            if self.embedding_model is not None and any(p.vector for p in pending):
                model = self.embedding_model
                conn.execute(
                    "INSERT OR IGNORE INTO ltm_meta (key, value) VALUES ('embedding_model', ?), "
                    "('dimensions', ?)",
                    (model.model, str(model.dimensions)),
                )
        matrix = self._matrices.get(user_id)
        if matrix is not None and new_rows and not superseded:
            self._matrices[user_id] = matrix.extended(new_rows, agent_id, run_id, expires)
        elif new_rows or superseded:
            self._matrices.pop(user_id, None)
        return events

    def _find_duplicate(
        self,
        conn: sqlite3.Connection,
        digest: str,
        user_id: str,
        agent_id: str | None,
        run_id: str | None,
        now_ts: float,
        seen: dict[str, StoredMemoryItem],
    ) -> tuple[StoredMemoryItem, str] | None:
        if not self.dedup:
            return None
        if digest in seen:
            return seen[digest], "exact duplicate of an earlier memory in this write"
        row = conn.execute(
            # INDEXED BY: the planner would otherwise pick the scope index and scan the user
            f"SELECT {COLUMNS} FROM ltm_memories m INDEXED BY ltm_memories_hash "
            "WHERE m.user_id = ? AND m.hash = ? "
            "AND m.agent_id IS ? AND m.run_id IS ? AND m.status = 'active' "
            "AND (m.expires_at IS NULL OR m.expires_at > ?) LIMIT 1",
            (user_id, digest, agent_id, run_id, now_ts),
        ).fetchone()
        if row is not None:
            return row_to_item(row), "exact duplicate of an existing memory"
        return None

    def _find_near(
        self,
        conn: sqlite3.Connection,
        i: int,
        near: float,
        near_dups: vec.NearDuplicates,
        added: list[StoredMemoryItem | None],
    ) -> tuple[StoredMemoryItem, str] | None:
        stored = near_dups.best_stored(i)
        if stored is not None and stored[0] >= near:
            row = conn.execute(
                f"SELECT {COLUMNS} FROM ltm_memories m WHERE m.rid = ?", (stored[1],)
            ).fetchone()
            if row is not None:
                return row_to_item(row), f"near duplicate (cosine {stored[0]:.3f})"
        earlier = near_dups.best_earlier(i)
        if earlier is not None and earlier[0] >= near:
            item = added[earlier[1]]
            assert item is not None
            return (
                item,
                f"near duplicate of an earlier memory in this write (cosine {earlier[0]:.3f})",
            )
        return None

    def _insert(
        self,
        conn: sqlite3.Connection,
        p: Pending,
        digest: str,
        user_id: str,
        agent_id: str | None,
        run_id: str | None,
        now_iso: str,
        expires: float | None,
    ) -> tuple[int, StoredMemoryItem]:
        mem_id = uuid.uuid4().hex
        occurred = p.occurred_at.isoformat() if p.occurred_at else None
        blob = vec.to_blob(p.vector) if p.vector is not None else None
        cur = conn.execute(
            "INSERT INTO ltm_memories (id, user_id, agent_id, run_id, content, context, "
            "speaker, hash, metadata, occurred_at, created_at, updated_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                mem_id,
                user_id,
                agent_id,
                run_id,
                p.text,
                p.context,
                p.speaker,
                digest,
                json.dumps(p.metadata, default=str),
                occurred,
                now_iso,
                now_iso,
                expires,
            ),
        )
        if blob is not None:
            conn.execute(
                "INSERT INTO ltm_vectors (rid, embedding) VALUES (?, ?)", (cur.lastrowid, blob)
            )
        conn.execute(
            "INSERT INTO ltm_fts (rowid, content, context, speaker, time) VALUES (?, ?, ?, ?, ?)",
            (cur.lastrowid, p.text, p.context, p.speaker, date_text(p.occurred_at)),
        )
        log_event(conn, mem_id, user_id, "add", None, p.text, None, now_iso)
        rid = int(cur.lastrowid or 0)
        row = conn.execute(
            f"SELECT {COLUMNS} FROM ltm_memories m WHERE m.rid = ?", (rid,)
        ).fetchone()
        return rid, row_to_item(row)

    def _supersede(
        self, conn: sqlite3.Connection, old_ids: list[str], new_id: str, user_id: str, at: str
    ) -> str | None:
        done = []
        for old in old_ids:
            row = conn.execute(
                "SELECT content FROM ltm_memories "
                "WHERE id = ? AND user_id = ? AND status = 'active'",
                (old, user_id),
            ).fetchone()
            if row is None:
                continue
            conn.execute(
                "UPDATE ltm_memories SET status = 'superseded', superseded_by = ?, "
                "updated_at = ? WHERE id = ?",
                (new_id, at, old),
            )
            log_event(conn, old, user_id, "supersede", row[0], None, f"superseded by {new_id}", at)
            done.append(f"{old} ({row[0]!r})")
        return "supersedes " + ", ".join(done) if done else None

    async def aclose(self) -> None:
        """Close the SQLite connection. Safe to call twice."""

        self.__dict__.get("_lexicons", {}).clear()  # the per-user lexical indexes

        def close() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                self._closed = True
                self._matrices.clear()

        await asyncio.to_thread(close)
