"""SQLite schema and row models of :class:`~mnemoscope.memory.LocalLongTermMemory`.

Tables (one file, names are stable and documented so the file can be inspected with the
``sqlite3`` shell):

``ltm_memories``
    one row per memory, active or superseded: scope, content, indexing context, hash,
    metadata (JSON), times (ISO-8601 UTC; ``expires_at`` as POSIX seconds).
``ltm_vectors``
    the embedding of a memory (same ``rid``) as a little-endian float32 blob; kept apart
    so that the rows a BM25 search joins stay small.
``ltm_fts``
    FTS5 index (``porter unicode61``) with one row per ``ltm_memories`` row, same rowid:
    columns ``content``, ``context`` (neighbouring turns), ``speaker``, ``time``.
``ltm_history``
    append-only log of what happened to each memory (add, update, supersede, delete).
``ltm_meta``
    key/value: schema version, embedding model and dimensions of the stored vectors.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from mnemoscope.memory._long_term_base import MemoryItem

SCHEMA_VERSION = "1"

DDL = """
CREATE TABLE IF NOT EXISTS ltm_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ltm_memories (
    rid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    user_id TEXT NOT NULL,
    agent_id TEXT,
    run_id TEXT,
    content TEXT NOT NULL,
    context TEXT NOT NULL DEFAULT '',
    speaker TEXT NOT NULL DEFAULT '',
    hash TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL DEFAULT 'active',
    superseded_by TEXT,
    occurred_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    expires_at REAL
);
CREATE TABLE IF NOT EXISTS ltm_vectors (rid INTEGER PRIMARY KEY, embedding BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS ltm_memories_scope ON ltm_memories (user_id, agent_id, run_id, status);
CREATE INDEX IF NOT EXISTS ltm_memories_hash ON ltm_memories (user_id, hash);
CREATE INDEX IF NOT EXISTS ltm_memories_expiry ON ltm_memories (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE VIRTUAL TABLE IF NOT EXISTS ltm_fts USING fts5 (
    content, context, speaker, time, tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS ltm_history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    event TEXT NOT NULL,
    old_content TEXT,
    new_content TEXT,
    reason TEXT,
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ltm_history_memory ON ltm_history (memory_id, seq);
CREATE INDEX IF NOT EXISTS ltm_history_user ON ltm_history (user_id);
"""

COLUMNS = (
    "rid, id, user_id, agent_id, run_id, content, speaker, metadata, status, superseded_by, "
    "occurred_at, created_at, updated_at, expires_at"
)


class StoredMemoryItem(MemoryItem):
    """A :class:`MemoryItem` with the native store's extra fields."""

    status: Literal["active", "superseded"] = "active"
    superseded_by: str | None = None
    """The id of the memory that replaced this one (``status == "superseded"``)."""
    occurred_at: datetime | None = None
    """When what the memory says happened (also in ``metadata["occurred_at"]``)."""
    expires_at: datetime | None = None


class UserStats(BaseModel):
    """A user of the store and how many memories they have (see ``users()``)."""

    user_id: str
    active: int
    """Memories that retrieval returns (not superseded, not expired)."""
    total: int
    """Every stored memory, superseded and expired ones included."""


class HistoryEntry(BaseModel):
    """One event in the life of a memory, oldest first in :meth:`history`."""

    memory_id: str
    event: Literal["add", "update", "supersede", "delete"]
    old_content: str | None = None
    new_content: str | None = None
    reason: str | None = None
    at: datetime


def row_to_item(row: sqlite3.Row | tuple[Any, ...], score: float | None = None) -> StoredMemoryItem:
    """Build an item from a row selected with :data:`COLUMNS`."""
    (
        _rid,
        mem_id,
        user_id,
        agent_id,
        run_id,
        content,
        speaker,
        metadata,
        status,
        superseded_by,
        occurred_at,
        created_at,
        updated_at,
        expires_at,
    ) = tuple(row)
    meta: dict[str, Any] = json.loads(metadata) if metadata else {}
    if speaker and "speaker" not in meta:
        meta["speaker"] = speaker
    if occurred_at:
        meta.setdefault("occurred_at", occurred_at)
    return StoredMemoryItem(
        id=mem_id,
        content=content,
        score=score,
        user_id=user_id,
        agent_id=agent_id,
        run_id=run_id,
        metadata=meta,
        created_at=datetime.fromisoformat(created_at),
        updated_at=datetime.fromisoformat(updated_at),
        status=status,
        superseded_by=superseded_by,
        occurred_at=datetime.fromisoformat(occurred_at) if occurred_at else None,
        expires_at=datetime.fromtimestamp(expires_at, UTC) if expires_at else None,
    )


HISTORY_COLUMNS = ", ".join(HistoryEntry.model_fields)
"""The ``ltm_history`` columns a :class:`HistoryEntry` is read from: its fields, same names."""


def row_to_history(row: tuple[Any, ...]) -> HistoryEntry:
    """Build an entry from a row selected with :data:`HISTORY_COLUMNS`."""
    fields = dict(zip(HistoryEntry.model_fields, row, strict=True))
    fields["at"] = datetime.fromisoformat(fields["at"])  # UTC, as every item's times
    return HistoryEntry(**fields)


def scope_clause(
    user_id: str, agent_id: str | None, run_id: str | None, *, alias: str = "m"
) -> tuple[str, list[Any]]:
    """``WHERE`` fragment and parameters restricting rows to one user (and agent/run)."""
    parts = [f"{alias}.user_id = ?"]
    params: list[Any] = [user_id]
    if agent_id is not None:
        parts.append(f"{alias}.agent_id = ?")
        params.append(agent_id)
    if run_id is not None:
        parts.append(f"{alias}.run_id = ?")
        params.append(run_id)
    return " AND ".join(parts), params


@dataclass
class Pending:
    """One memory about to be written."""

    text: str
    speaker: str = ""
    context: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    occurred_at: datetime | None = None
    supersedes: list[str] = field(default_factory=list)
    vector: list[float] | None = None


def utcnow() -> datetime:
    return datetime.now(UTC)


def embed_text(p: Pending) -> str:
    return f"{p.speaker}: {p.text}" if p.speaker else p.text


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: one write lock, all or nothing."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def remove_rows(conn: sqlite3.Connection, rids: Sequence[int]) -> None:
    for start in range(0, len(rids), 500):
        chunk = list(rids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        conn.execute(f"DELETE FROM ltm_fts WHERE rowid IN ({marks})", chunk)
        conn.execute(f"DELETE FROM ltm_vectors WHERE rid IN ({marks})", chunk)
        conn.execute(f"DELETE FROM ltm_memories WHERE rid IN ({marks})", chunk)


def log_event(
    conn: sqlite3.Connection,
    memory_id: str,
    user_id: str,
    event: str,
    old: str | None,
    new: str | None,
    reason: str | None,
    at: str,
) -> None:
    conn.execute(
        "INSERT INTO ltm_history (memory_id, user_id, event, old_content, new_content, reason, "
        "at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (memory_id, user_id, event, old, new, reason, at),
    )
