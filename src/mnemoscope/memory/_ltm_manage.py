"""Management calls of :class:`~mnemoscope.memory.LocalLongTermMemory`: one part of the store.

List, get, update, delete, history, erase a user, purge expired memories, re-embed. The
store inherits them (they are its public API) and gives this part its file part; nothing
else is shared.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from mnemoscope.errors import UserError
from mnemoscope.memory import _ltm_index as vec
from mnemoscope.memory._ltm_file import LtmFile
from mnemoscope.memory._ltm_schema import (
    COLUMNS,
    HISTORY_COLUMNS,
    HistoryEntry,
    Pending,
    StoredMemoryItem,
    UserStats,
    embed_text,
    log_event,
    remove_rows,
    row_to_history,
    row_to_item,
    scope_clause,
    transaction,
    utcnow,
)
from mnemoscope.memory._ltm_text import content_hash, date_text, parse_when


class LocalLTMManagement:
    """What :class:`LocalLongTermMemory` offers beyond ``record``/``retrieve``.

    Args:
        file: the store's file part, the only thing these calls use.
    """

    def __init__(self, file: LtmFile) -> None:
        self._file = file

    async def users(self) -> builtins.list[UserStats]:
        """Every user with memories in the store, by user id, with their counts."""
        now = time.time()
        rows = await self._file.run(
            lambda conn: conn.execute(
                "SELECT user_id, SUM(status = 'active' AND (expires_at IS NULL OR "
                "expires_at > ?)), COUNT(*) FROM ltm_memories GROUP BY user_id ORDER BY user_id",
                (now,),
            ).fetchall()
        )
        return [UserStats(user_id=u, active=int(a or 0), total=int(t)) for u, a, t in rows]

    async def stored_embedding(self) -> tuple[str, int] | None:
        """``(model name, dimensions)`` of the vectors in the file, ``None`` if it has none.

        Read without loading any model, so a caller can check that an embedder fits the
        store before paying for loading it.
        """
        meta = dict(
            await self._file.run(
                lambda conn: conn.execute(
                    "SELECT key, value FROM ltm_meta WHERE key IN ('embedding_model', 'dimensions')"
                ).fetchall()
            )
        )
        if "dimensions" not in meta:
            return None
        return str(meta.get("embedding_model")), int(meta["dimensions"])

    async def list(
        self,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        include_superseded: bool = False,
        include_expired: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[StoredMemoryItem]:
        """The memories of a scope, oldest first."""
        where, params = scope_clause(user_id, agent_id, run_id)
        if not include_superseded:
            where += " AND m.status = 'active'"
        if not include_expired:
            where += " AND (m.expires_at IS NULL OR m.expires_at > ?)"
            params.append(time.time())
        sql = f"SELECT {COLUMNS} FROM ltm_memories m WHERE {where} ORDER BY m.rid"
        sql += " LIMIT ? OFFSET ?"
        params += [-1 if limit is None else limit, offset]
        rows = await self._file.run(lambda conn: conn.execute(sql, params).fetchall())
        return [row_to_item(r) for r in rows]

    async def get(
        self, memory_id: str, *, include_expired: bool = False
    ) -> StoredMemoryItem | None:
        """One memory by id (superseded ones too), or ``None``."""
        row = await self._file.run(
            lambda conn: conn.execute(
                f"SELECT {COLUMNS} FROM ltm_memories m WHERE m.id = ?", (memory_id,)
            ).fetchone()
        )
        if row is None:
            return None
        item = row_to_item(row)
        if not include_expired and item.expires_at is not None and item.expires_at <= utcnow():
            return None
        return item

    async def update(
        self,
        memory_id: str,
        content: str,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> StoredMemoryItem:
        """Replace a memory's text (and metadata when given); the old text stays in history.

        Raises:
            KeyError: no memory has this id.
        """
        self._file.writable("update a memory")
        text = content.strip()
        if not text:
            raise UserError("update() needs a non-empty content; use delete() to remove a memory")
        speaker = await self._file.run(
            lambda conn: conn.execute(
                "SELECT speaker FROM ltm_memories WHERE id = ?", (memory_id,)
            ).fetchone()
        )
        if speaker is None:
            raise KeyError(memory_id)
        vector = None
        if self._file.embedding_model is not None:
            await self._file.require_vectors()
            vector = await self._file.embedding_model.embed_one(
                embed_text(Pending(text, speaker[0]))
            )

        def write(conn: sqlite3.Connection) -> StoredMemoryItem:
            with transaction(conn):
                row = conn.execute(
                    "SELECT rid, user_id, content, speaker, occurred_at, metadata, context "
                    "FROM ltm_memories WHERE id = ?",
                    (memory_id,),
                ).fetchone()
                if row is None:
                    raise KeyError(memory_id)
                rid, user_id, old, speaker, occurred, old_meta, context = row
                now = utcnow().isoformat()
                meta = json.dumps(metadata, default=str) if metadata is not None else old_meta
                conn.execute(
                    "UPDATE ltm_memories SET content = ?, hash = ?, metadata = ?, updated_at = ? "
                    "WHERE rid = ?",
                    (text, content_hash(text), meta, now, rid),
                )
                conn.execute("DELETE FROM ltm_vectors WHERE rid = ?", (rid,))
                if vector is not None:
                    conn.execute(
                        "INSERT INTO ltm_vectors (rid, embedding) VALUES (?, ?)",
                        (rid, vec.to_blob(vector)),
                    )
                conn.execute("DELETE FROM ltm_fts WHERE rowid = ?", (rid,))
                conn.execute(
                    "INSERT INTO ltm_fts (rowid, content, context, speaker, time) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (rid, text, context, speaker, date_text(parse_when(occurred))),
                )
                log_event(conn, memory_id, user_id, "update", old, text, None, now)
                self._file.matrices.pop(user_id, None)
                new = conn.execute(
                    f"SELECT {COLUMNS} FROM ltm_memories m WHERE m.rid = ?", (rid,)
                ).fetchone()
            return row_to_item(new)

        return await self._file.run(write)

    async def delete(self, memory_id: str) -> bool:
        """Remove a memory (its history keeps a ``delete`` entry). ``False`` if unknown."""
        self._file.writable("delete a memory")

        def write(conn: sqlite3.Connection) -> bool:
            with transaction(conn):
                row = conn.execute(
                    "SELECT rid, user_id, content FROM ltm_memories WHERE id = ?", (memory_id,)
                ).fetchone()
                if row is None:
                    return False
                remove_rows(conn, [row[0]])
                log_event(
                    conn, memory_id, row[1], "delete", row[2], None, None, utcnow().isoformat()
                )
                self._file.matrices.pop(row[1], None)
            return True

        return await self._file.run(write)

    async def history(self, memory_id: str) -> builtins.list[HistoryEntry]:
        """Everything that happened to a memory, oldest first (empty if unknown)."""
        rows = await self._file.run(
            lambda conn: conn.execute(
                f"SELECT {HISTORY_COLUMNS} FROM ltm_history WHERE memory_id = ? ORDER BY seq",
                (memory_id,),
            ).fetchall()
        )
        return [row_to_history(r) for r in rows]

    async def erase_user(self, user_id: str) -> int:
        """Delete every memory of a user and their history; returns how many memories."""
        self._file.writable("erase a user")

        def write(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                rids = [
                    r[0]
                    for r in conn.execute(
                        "SELECT rid FROM ltm_memories WHERE user_id = ?", (user_id,)
                    ).fetchall()
                ]
                remove_rows(conn, rids)
                conn.execute("DELETE FROM ltm_history WHERE user_id = ?", (user_id,))
            self._file.matrices.pop(user_id, None)
            return len(rids)

        return await self._file.run(write)

    async def purge_expired(self) -> int:
        """Delete every expired memory (history keeps a ``delete`` entry); returns how many."""
        self._file.writable("purge expired memories")

        def write(conn: sqlite3.Connection) -> int:
            now = utcnow()
            with transaction(conn):
                rows = conn.execute(
                    "SELECT rid, id, user_id, content FROM ltm_memories "
                    "WHERE expires_at IS NOT NULL AND expires_at <= ?",
                    (now.timestamp(),),
                ).fetchall()
                remove_rows(conn, [r[0] for r in rows])
                for _, mem_id, user_id, text in rows:
                    log_event(
                        conn, mem_id, user_id, "delete", text, None, "expired", now.isoformat()
                    )
                    self._file.matrices.pop(user_id, None)
            return len(rows)

        return await self._file.run(write)

    async def reembed(
        self,
        *,
        batch_size: int = 256,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Re-embed every memory with the current ``embedding_model``; returns how many.

        Args:
            batch_size: memories embedded (and written) per batch.
            progress: called with ``(done, total)`` after each batch (and once with
                ``(0, total)`` before the first), e.g. to print progress.
        """
        if self._file.embedding_model is None:
            raise UserError("reembed() needs an embedding_model; pass one to the store")
        if batch_size < 1:
            raise UserError(f"batch_size must be >= 1, got {batch_size}")
        self._file.writable("re-embed memories")
        model = self._file.embedding_model
        rows = await self._file.run(
            lambda conn: conn.execute(
                "SELECT rid, content, speaker FROM ltm_memories ORDER BY rid"
            ).fetchall()
        )
        if progress is not None:
            progress(0, len(rows))
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            vectors = await model.embed([embed_text(Pending(r[1], r[2])) for r in chunk])

            def write(conn: sqlite3.Connection, chunk: Any = chunk, vectors: Any = vectors) -> None:
                with transaction(conn):
                    conn.executemany(
                        "INSERT OR REPLACE INTO ltm_vectors (rid, embedding) VALUES (?, ?)",
                        [(r[0], vec.to_blob(v)) for r, v in zip(chunk, vectors, strict=True)],
                    )

            await self._file.run(write)
            if progress is not None:
                progress(start + len(chunk), len(rows))

        def finish(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(
                    "INSERT OR REPLACE INTO ltm_meta (key, value) VALUES ('embedding_model', ?), "
                    "('dimensions', ?)",
                    (model.model, str(model.dimensions)),
                )
            self._file.matrices.clear()
            self._file.vector_mismatch = None

        await self._file.run(finish)
        return len(rows)
