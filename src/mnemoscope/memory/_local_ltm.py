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

import logging
import os
import time
from datetime import datetime, timedelta
from typing import Any, TypeVar

from mnemoscope.embedding import EmbeddingModelBase
from mnemoscope.errors import UserError
from mnemoscope.memory._long_term_base import (
    LongTermMemoryBase,
    MemoryItem,
    MemoryScope,
    RecordInput,
    RecordRequest,
    RecordResult,
    RetrieveRequest,
    call_scope,
)
from mnemoscope.memory._ltm_file import LtmFile
from mnemoscope.memory._ltm_infer import ExtractedFacts, build_infer_messages
from mnemoscope.memory._ltm_manage import LocalLTMManagement
from mnemoscope.memory._ltm_schema import (
    COLUMNS,
    Pending,
    embed_text,
    row_to_item,
    scope_clause,
)
from mnemoscope.memory._ltm_search import (
    DEFAULT_SETTINGS,
    LtmSearch,
    RetrievalSettings,
    SearchMode,
)
from mnemoscope.memory._ltm_text import neighbour_context, parse_when
from mnemoscope.memory._ltm_write import LtmWriter
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


class LocalLongTermMemory(LocalLTMManagement, LongTermMemoryBase):
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
            one ``record`` call, are indexed with it (0 disables; 2 scores best on LoCoMo,
            docs/long-term-memory.md quotes its figures). The turns beyond the next one
            count for ``retrieval.far_context_weight`` (half) as much, so that a short
            reply such as "Yes." does not outrank the turn it answers. Applies to what is
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
        context_window: int = 2,
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
        self.retrieval: RetrievalSettings = DEFAULT_SETTINGS
        """Scoring knobs; assign a new :class:`RetrievalSettings` to change them."""
        # the parts: the file (connection and caches), then what runs on it. The parts
        # read the settings above from the store at each call.
        self._file = LtmFile(
            self.path,
            embedding_model=embedding_model,
            read_only=read_only,
            create=self.create,
            busy_timeout=busy_timeout,
        )
        LocalLTMManagement.__init__(self, self._file)
        self._search = LtmSearch(self._file, self)
        self._writer = LtmWriter(self._file, self)
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
        request = RecordRequest(
            content, call_scope(user_id, agent_id, run_id), infer, dict(metadata or {})
        )
        return await self._record(request, occurred_at=occurred_at, ttl=ttl)

    async def _record(
        self,
        request: RecordRequest,
        *,
        occurred_at: datetime | str | None = None,
        ttl: timedelta | float | None = None,
    ) -> RecordResult:
        scope = request.scope
        if not scope.user_id:
            raise UserError("record() needs a non-empty user_id")
        self._file.writable("record memories")
        use_infer = self.infer if request.infer is None else request.infer
        if use_infer and self.chat_model is None:
            raise UserError(
                "record(infer=True) needs a chat_model; pass chat_model= to LocalLongTermMemory"
            )
        expiry = _seconds(ttl, "ttl") if ttl is not None else self.ttl
        base_meta = request.metadata
        when = parse_when(occurred_at) or parse_when(base_meta.get("occurred_at"))
        if occurred_at is not None and when is None:
            raise UserError(
                f"occurred_at must be a datetime or ISO-8601 string, got {occurred_at!r}"
            )
        pending = self._pending_from_input(request.content, base_meta, when)
        if use_infer and pending:
            pending = await self._infer(pending, scope, base_meta, when)
        if not pending:
            return RecordResult()
        if self.embedding_model is not None:
            await self._file.require_vectors()
            vectors = await self.embedding_model.embed([embed_text(p) for p in pending])
            for p, v in zip(pending, vectors, strict=True):
                p.vector = v
        ids = (scope.user_id, scope.agent_id, scope.run_id)
        events = await self._file.run(lambda conn: self._writer.write(conn, pending, *ids, expiry))
        return RecordResult(events=events)

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
        request = RetrieveRequest(query, call_scope(user_id, agent_id, run_id), limit, threshold)
        return await self._retrieve(request, mode=mode, include_superseded=include_superseded)

    async def _retrieve(
        self,
        request: RetrieveRequest,
        *,
        mode: SearchMode | None = None,
        include_superseded: bool = False,
    ) -> list[MemoryItem]:
        scope = request.scope
        return await self._search.retrieve(
            request.query,
            (scope.user_id, scope.agent_id, scope.run_id),
            limit=request.limit,
            threshold=request.threshold,
            mode=mode,
            include_superseded=include_superseded,
        )

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
        lines = [
            embed_text(p) if isinstance(e, Msg) and p.text else None
            for p, e in zip(items, raw, strict=True)
        ]
        for i, (p, e) in enumerate(zip(items, raw, strict=True)):
            if isinstance(e, Msg):
                p.context = neighbour_context(lines, i, self.context_window)
        return [p for p in items if p.text]

    async def _infer(
        self,
        pending: list[Pending],
        scope: MemoryScope,
        base_meta: dict[str, Any],
        when: datetime | None,
    ) -> list[Pending]:
        assert self.chat_model is not None
        related: list[MemoryItem] = []
        if self.infer_related:
            query = "\n".join(p.text for p in pending)
            related = await self._retrieve(RetrieveRequest(query, scope, self.infer_related))
            # a correction often shares no word with what it corrects ("I moved to Berlin"
            # vs "lives in Paris"): fill the rest with the newest memories of the scope
            missing = self.infer_related - len(related)
            if missing > 0:
                seen = {item.id for item in related}
                where, params = scope_clause(scope.user_id, scope.agent_id, scope.run_id)
                sql = (
                    f"SELECT {COLUMNS} FROM ltm_memories m WHERE {where} "
                    "AND m.status = 'active' AND (m.expires_at IS NULL OR m.expires_at > ?) "
                    "ORDER BY m.rid DESC LIMIT ?"
                )
                args = [*params, time.time(), self.infer_related]
                rows = await self._file.run(lambda conn: conn.execute(sql, args).fetchall())
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

    async def aclose(self) -> None:
        """Close the SQLite connection. Safe to call twice."""
        await self._file.close()
