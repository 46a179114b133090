"""Writing of :class:`~mnemoscope.memory.LocalLongTermMemory`: one part of the store.

:class:`LtmWriter` stores the memories one ``record`` call prepared, in one transaction:
exact duplicates (normalised hash, same scope) and near duplicates (cosine to an active
memory of the scope, or to an earlier one of the same call) are skipped, each new memory
goes into the memories, vectors and FTS5 tables and the history, and the memories it
supersedes are marked. The user's cached vector matrix is extended or dropped after.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any, Protocol

from mnemoscope.memory import _ltm_index as vec
from mnemoscope.memory._long_term_base import RecordEvent
from mnemoscope.memory._ltm_file import LtmFile
from mnemoscope.memory._ltm_schema import (
    COLUMNS,
    Pending,
    StoredMemoryItem,
    log_event,
    row_to_item,
    transaction,
    utcnow,
)
from mnemoscope.memory._ltm_text import content_hash, date_text


class WriteRules(Protocol):
    """The store's settings a write reads (at each write, so changing them applies)."""

    dedup: bool
    near_duplicate_threshold: float | None


class LtmWriter:
    """The write transaction of ``record``.

    Args:
        file: the store's file part.
        rules: where the duplicate rules are read (the store itself).
    """

    def __init__(self, file: LtmFile, rules: WriteRules) -> None:
        self._file = file
        self._rules = rules

    def write(
        self,
        conn: sqlite3.Connection,
        pending: list[Pending],
        user_id: str,
        agent_id: str | None,
        run_id: str | None,
        ttl: float | None,
    ) -> list[RecordEvent]:
        """Store ``pending`` in the scope (inside :meth:`LtmFile.run`), expiring after
        ``ttl`` seconds; one event per pending memory (``add``, ``update`` or ``skip``)."""
        np_mod = vec.numpy() if self._file.embedding_model is not None else None
        near = (
            self._rules.near_duplicate_threshold if self._file.embedding_model is not None else None
        )
        now = utcnow()
        now_iso, now_ts = now.isoformat(), now.timestamp()
        expires = now_ts + ttl if ttl is not None else None
        events: list[RecordEvent] = []
        new_rows: list[tuple[int, Any]] = []  # (rid, unit vector) to append to the cache
        superseded = False
        with transaction(conn):
            near_dups = None
            if near is not None and np_mod is not None and all(p.vector for p in pending):
                matrix = self._file.matrix(conn, user_id)
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
            if self._file.embedding_model is not None and any(p.vector for p in pending):
                model = self._file.embedding_model
                conn.execute(
                    "INSERT OR IGNORE INTO ltm_meta (key, value) VALUES ('embedding_model', ?), "
                    "('dimensions', ?)",
                    (model.model, str(model.dimensions)),
                )
        matrix = self._file.matrices.get(user_id)
        if matrix is not None and new_rows and not superseded:
            self._file.matrices[user_id] = matrix.extended(new_rows, agent_id, run_id, expires)
        elif new_rows or superseded:
            self._file.matrices.pop(user_id, None)
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
        if not self._rules.dedup:
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
