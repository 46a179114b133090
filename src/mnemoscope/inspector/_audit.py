"""The audit log of edits made through the inspector: who, when, what.

Example::

    log = AuditLog("audit.db")           # one SQLite file; ":memory:" keeps it in process
    await log.record("alice", "ltm.update", "mem-1", before="old", after="new")
    await log.entries("alice")           # newest first, only alice's

Entries are append-only: the log has no call that changes or deletes one.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mnemoscope.errors import MemoryStoreError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS inspector_audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    user_id TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    before TEXT,
    after TEXT
);
CREATE INDEX IF NOT EXISTS inspector_audit_user ON inspector_audit (user_id, seq);
"""


@dataclass(frozen=True)
class AuditEntry:
    seq: int
    at: datetime
    user_id: str
    """Who made the edit (the signed-in user)."""
    action: str
    """``ltm.update``, ``ltm.delete``, ``agentic.write``, ``agentic.index``..."""
    target: str
    """The memory id or file name."""
    before: str | None
    after: str | None


class AuditLog:
    """Append-only log in a SQLite file (WAL, shared by processes)."""

    def __init__(self, path: str | os.PathLike[str] = ":memory:") -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
                if self.path != ":memory:":
                    conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(_SCHEMA)
            except sqlite3.Error as exc:
                raise MemoryStoreError(f"cannot open the audit log {self.path!r}: {exc}") from None
            self._conn = conn
        return self._conn

    async def record(
        self,
        user_id: str,
        action: str,
        target: str,
        *,
        before: str | None = None,
        after: str | None = None,
    ) -> AuditEntry:
        at = datetime.now(UTC)

        def write() -> int:
            with self._lock:
                conn = self._connect()
                with conn:
                    cur = conn.execute(
                        "INSERT INTO inspector_audit (at, user_id, action, target, before, after) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (at.isoformat(), user_id, action, target, before, after),
                    )
                return int(cur.lastrowid or 0)

        seq = await asyncio.to_thread(write)
        return AuditEntry(seq, at, user_id, action, target, before, after)

    async def entries(
        self, user_id: str, *, target: str | None = None, limit: int = 200
    ) -> list[AuditEntry]:
        """The user's entries, newest first (only that user's: there is no global read)."""
        sql = "SELECT seq, at, user_id, action, target, before, after FROM inspector_audit "
        sql += "WHERE user_id = ?" + (" AND target = ?" if target is not None else "")
        params: list[str] = [user_id] + ([target] if target is not None else [])

        def read() -> list[tuple[Any, ...]]:
            with self._lock:
                return (
                    self._connect()
                    .execute(sql + " ORDER BY seq DESC LIMIT ?", (*params, limit))
                    .fetchall()
                )

        rows = await asyncio.to_thread(read)
        return [
            AuditEntry(int(s), datetime.fromisoformat(a), u, ac, t, b, af)
            for s, a, u, ac, t, b, af in rows
        ]

    async def aclose(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
