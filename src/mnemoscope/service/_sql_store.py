"""What the SQL service stores (PostgreSQL, SQLite) share: the tables, and the plain
statements on sessions and replies, in SQL that both read alike (``$1``-style parameters;
SQLite takes ``double precision``, ``bigint``, ``timestamptz`` and ``boolean`` by their
type affinity and keeps ``lock_expires`` as Unix time)."""

from __future__ import annotations

import time
from abc import abstractmethod
from typing import Any

from mnemoscope.errors import UserError
from mnemoscope.service._store import ReplyInfo, ServerStoreBase, SessionInfo, StoredEvent

SQL_TABLES = """
CREATE TABLE IF NOT EXISTS {p}_sessions (
    user_id text NOT NULL,
    session_id text NOT NULL,
    created_at double precision NOT NULL,
    title text NOT NULL DEFAULT '',
    lock_token bigint,
    lock_expires timestamptz,
    running_reply text,
    PRIMARY KEY (user_id, session_id)
);
CREATE TABLE IF NOT EXISTS {p}_replies (
    user_id text NOT NULL,
    session_id text NOT NULL,
    reply_id text NOT NULL,
    status text NOT NULL,
    token bigint NOT NULL,
    created_at double precision NOT NULL,
    last_seq integer NOT NULL DEFAULT 0,
    cancel boolean NOT NULL DEFAULT false,
    PRIMARY KEY (user_id, session_id, reply_id),
    FOREIGN KEY (user_id, session_id) REFERENCES {p}_sessions ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS {p}_events (
    user_id text NOT NULL,
    session_id text NOT NULL,
    reply_id text NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data text NOT NULL,
    PRIMARY KEY (user_id, session_id, reply_id, seq),
    FOREIGN KEY (user_id, session_id, reply_id) REFERENCES {p}_replies ON DELETE CASCADE
);
"""
"""``{p}`` is the table prefix: ``{p}_sessions`` (one row per session, with its lease),
``{p}_replies`` (one per reply), ``{p}_events`` (a reply's log)."""

_REPLY = "reply_id, status, created_at, last_seq, cancel"


class SQLStoreBase(ServerStoreBase):
    """A service store in SQL tables named ``<table_prefix>_...`` (see ``SQL_TABLES``)."""

    table_prefix: str

    def _set_prefix(self, table_prefix: str) -> None:
        if not table_prefix.isidentifier():
            raise UserError(
                f"{type(self).__name__}: table_prefix must be an identifier, got {table_prefix!r}"
            )
        self.table_prefix = table_prefix

    def _t(self, name: str) -> str:
        return f"{self.table_prefix}_{name}"

    @abstractmethod
    async def _rows(self, what: str, sql: str, *args: Any) -> list[Any]:
        """The rows of one statement (``$1``-style parameters), as its own transaction."""

    async def create_session(self, user_id: str, session_id: str, title: str) -> SessionInfo | None:
        info = SessionInfo(user_id, session_id, time.time(), title)
        sql = (
            f"INSERT INTO {self._t('sessions')} (user_id, session_id, created_at, title) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1"
        )
        done = await self._rows(
            "create a session", sql, user_id, session_id, info.created_at, title
        )
        return info if done else None

    async def list_sessions(self, user_id: str) -> list[SessionInfo]:
        sql = (
            f"SELECT session_id, created_at, title FROM {self._t('sessions')} "
            "WHERE user_id = $1 ORDER BY created_at, session_id"
        )
        rows = await self._rows("list sessions", sql, user_id)
        return [SessionInfo(user_id, r[0], r[1], r[2]) for r in rows]

    async def get_session(self, user_id: str, session_id: str) -> SessionInfo | None:
        sql = (
            f"SELECT created_at, title FROM {self._t('sessions')} "
            "WHERE user_id = $1 AND session_id = $2"
        )
        rows = await self._rows("read a session", sql, user_id, session_id)
        return SessionInfo(user_id, session_id, rows[0][0], rows[0][1]) if rows else None

    async def release(self, user_id: str, session_id: str, token: int) -> None:
        sql = (
            f"UPDATE {self._t('sessions')} SET lock_token = NULL, lock_expires = NULL "
            "WHERE user_id = $1 AND session_id = $2 AND lock_token = $3"
        )
        await self._rows("release a session lock", sql, user_id, session_id, token)

    async def request_cancel(
        self, user_id: str, session_id: str, reply_id: str
    ) -> ReplyInfo | None:
        sql = (
            f"UPDATE {self._t('replies')} SET cancel = (status = 'running') "
            f"WHERE user_id = $1 AND session_id = $2 AND reply_id = $3 RETURNING {_REPLY}"
        )
        rows = await self._rows("cancel a reply", sql, user_id, session_id, reply_id)
        return _reply_info(rows[0]) if rows else None

    async def get_reply(self, user_id: str, session_id: str, reply_id: str) -> ReplyInfo | None:
        sql = (
            f"SELECT {_REPLY} FROM {self._t('replies')} "
            "WHERE user_id = $1 AND session_id = $2 AND reply_id = $3"
        )
        rows = await self._rows("read a reply", sql, user_id, session_id, reply_id)
        return _reply_info(rows[0]) if rows else None

    async def list_replies(self, user_id: str, session_id: str) -> list[ReplyInfo]:
        sql = (
            f"SELECT {_REPLY} FROM {self._t('replies')} "
            "WHERE user_id = $1 AND session_id = $2 ORDER BY created_at, reply_id"
        )
        return [_reply_info(r) for r in await self._rows("list replies", sql, user_id, session_id)]

    async def _events_after(
        self, user_id: str, session_id: str, reply_id: str, after: int
    ) -> list[StoredEvent]:
        """The reply's stored events with ``seq > after``, now (no waiting)."""
        sql = (
            f"SELECT seq, type, data FROM {self._t('events')} "
            "WHERE user_id = $1 AND session_id = $2 AND reply_id = $3 AND seq > $4 ORDER BY seq"
        )
        rows = await self._rows("read reply events", sql, user_id, session_id, reply_id, after)
        return [StoredEvent(r[0], r[1], r[2]) for r in rows]


def _reply_info(row: Any) -> ReplyInfo:
    return ReplyInfo(row[0], row[1], row[2], row[3], bool(row[4]))
