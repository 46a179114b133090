"""The service's shared state in a SQLite file: several processes on one machine.

Example::

    app = create_app("myapp:make_agent", store="sqlite:///var/lib/myapp/service.db")
    # mnemoscope serve myapp:make_agent --store sqlite:///var/lib/myapp/service.db --workers 4

Needs no extra: Python's own ``sqlite3``, on a thread of this store (one connection each
process). The file is in WAL mode (readers never wait for the writer), and every step that
changes the lock or a reply's log is one ``BEGIN IMMEDIATE`` transaction, so the processes
sharing the file take the session lock and append events one at a time. Lock expiry uses
the machine's clock, which every process shares. Not for a network file system (SQLite's
locks do not hold there): several machines need Redis or PostgreSQL.

Tables (``<p>`` is ``table_prefix``, default ``mnemoscope_svc``), created when missing:

=====================  =================================================================
table                  holds
=====================  =================================================================
``<p>_fence``          one row: the last fencing token handed out (tokens never repeat,
                       even for a session deleted and created again)
``<p>_sessions``       one row per ``(user_id, session_id)``: ``lock_token``,
                       ``lock_expires`` (Unix time), ``running_reply``
``<p>_replies``        one row per reply: ``status``, ``token``, ``last_seq``, ``cancel``
``<p>_events``         a reply's events, primary key ``(user_id, session_id, reply_id, seq)``
=====================  =================================================================

A reader waiting for events of a reply that runs in this process is woken by the append;
one in another process polls the file every ``POLL_EVERY`` seconds.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from mnemoscope.errors import UserError
from mnemoscope.service import _store as st
from mnemoscope.service._sql_store import SQL_TABLES, SQLStoreBase
from mnemoscope.service._store import AppendResult, ReplyStatus, StoredEvent

POLL_EVERY = 0.05
"""Seconds between reads of a reader waiting for a reply that runs in another process."""

_DDL = (
    """
CREATE TABLE IF NOT EXISTS {p}_fence (n INTEGER NOT NULL);
INSERT INTO {p}_fence (n) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM {p}_fence);
"""
    + SQL_TABLES
)


_NUMBERED = re.compile(r"\$(\d+)")

_T = TypeVar("_T")


class SQLiteServiceStore(SQLStoreBase):
    """Sessions, reply logs and fenced session locks in a SQLite file (see module docstring).

    Args:
        url: ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (SQLAlchemy's
            form), or a plain path.
        table_prefix: tables are ``<prefix>_sessions``, ``<prefix>_replies``, ...
        busy_timeout: seconds a step waits for another process's transaction on the file.
    """

    server_name = "SQLite"
    dropped_errors = ()
    driver_errors = (sqlite3.Error,)

    def __init__(
        self, url: str, *, table_prefix: str = "mnemoscope_svc", busy_timeout: float = 10.0
    ) -> None:
        self._set_prefix(table_prefix)
        path = url.split(":///", 1)[1] if url.startswith("sqlite:///") else url
        if not path or path == ":memory:" or "://" in path:
            raise UserError(
                f"SQLiteServiceStore needs a file, e.g. sqlite:///service.db, got {url!r} "
                "(memory:// is the store for one process)"
            )
        self.url = url
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ plumbing
    async def open(self) -> None:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="mnemoscope-svc-sqlite")
            try:
                await self._do("open the file", self._open)
            except BaseException:
                self._thread.shutdown(wait=False)
                self._thread = None  # the next call tries again
                raise

    def _open(self) -> None:
        # used on this store's one thread only; transactions are explicit (BEGIN IMMEDIATE)
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        self._conn = conn
        with self._tx() as c:  # executescript() would commit: one statement at a time
            for statement in _DDL.format(p=self.table_prefix).split(";\n"):
                if statement.strip():
                    c.execute(statement)

    async def aclose(self) -> None:
        if self._thread is not None:
            conn, self._conn = self._conn, None
            if conn is not None:
                await asyncio.get_running_loop().run_in_executor(self._thread, conn.close)
            self._thread.shutdown(wait=True)
            self._thread = None

    async def ping(self) -> None:
        await self._do("answer SELECT 1", lambda: self._c.execute("SELECT 1").fetchone())

    async def _do(self, what: str, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on this store's thread; SQLite's errors become ServiceStoreError."""
        if self._thread is None:
            await self.open()
        loop = asyncio.get_running_loop()
        return await self._call(what, lambda: loop.run_in_executor(self._thread, fn), retry=False)

    @property
    def _c(self) -> sqlite3.Connection:
        assert self._conn is not None, "SQLiteServiceStore used before open()"
        return self._conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: other processes' writes wait for it."""
        c = self._c
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")

    async def _rows(self, what: str, sql: str, *args: Any) -> list[Any]:
        sql = _NUMBERED.sub(r"?\1", sql)  # SQLite numbers parameters ?1, ?2, ...
        return await self._do(what, lambda: self._c.execute(sql, args).fetchall())

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ sessions
    async def delete_session(self, user_id: str, session_id: str, token: int) -> bool:
        sql = f"DELETE FROM {self._t('sessions')} WHERE user_id=? AND session_id=? AND lock_token=?"

        def op() -> bool:
            with self._tx() as c:
                return c.execute(sql, (user_id, session_id, token)).rowcount == 1

        done = await self._do("delete a session", op)
        self._notify()
        return done

    # ---------------------------------------------------------------------- lock
    async def _acquire(
        self, key: st.SessionKey, ttl: float, failed_event: str, reply_id: str | None
    ) -> st.AcquireResult:
        where = (key.user_id, key.session_id)
        sessions, replies, events = self._t("sessions"), self._t("replies"), self._t("events")

        def op() -> st.AcquireResult:
            with self._tx() as c:
                row = c.execute(
                    f"SELECT lock_token, lock_expires, running_reply FROM {sessions} "
                    "WHERE user_id=? AND session_id=?",
                    where,
                ).fetchone()
                if row is None:
                    return st.NoSession()
                now = time.time()
                if row[0] is not None and row[1] > now:
                    return st.Busy(row[2])
                fence = c.execute(f"UPDATE {self._t('fence')} SET n = n + 1 RETURNING n")
                token = int(fence.fetchone()[0])
                c.execute(
                    f"UPDATE {sessions} SET lock_token=?, lock_expires=?, running_reply=NULL "
                    "WHERE user_id=? AND session_id=?",
                    (token, now + ttl, *where),
                )
                running = row[2]
                if running is not None:  # left by a lost holder: closed as failed
                    reply = (*where, running)
                    last = c.execute(
                        f"SELECT last_seq FROM {replies} "
                        "WHERE user_id=? AND session_id=? AND reply_id=?",
                        reply,
                    ).fetchone()[0]
                    c.execute(
                        f"INSERT INTO {events} VALUES (?, ?, ?, ?, 'reply_failed', ?)",
                        (*reply, last + 1, failed_event),
                    )
                    c.execute(
                        f"UPDATE {replies} SET status='failed', last_seq=? "
                        "WHERE user_id=? AND session_id=? AND reply_id=?",
                        (last + 1, *reply),
                    )
                if reply_id is not None:
                    self._start(c, (*where, reply_id), token)
                return st.Acquired(token, running)

        result = await self._do("take a session lock", op)
        if isinstance(result, st.Acquired) and result.recovered_reply:
            self._notify()  # readers of the recovered reply in this process
        return result

    async def _heartbeat(
        self, key: st.SessionKey, token: int, ttl: float, reply_id: str | None
    ) -> AppendResult:
        def op() -> AppendResult:
            with self._tx() as c:
                renewed = c.execute(
                    f"UPDATE {self._t('sessions')} SET lock_expires=? "
                    "WHERE user_id=? AND session_id=? AND lock_token=?",
                    (time.time() + ttl, key.user_id, key.session_id, token),
                ).rowcount
                if not renewed:
                    return AppendResult(fenced=True)
                row = c.execute(
                    f"SELECT cancel FROM {self._t('replies')} "
                    "WHERE user_id=? AND session_id=? AND reply_id=?",
                    (key.user_id, key.session_id, reply_id or ""),
                ).fetchone()
                return AppendResult(cancel_requested=bool(row and row[0]))

        return await self._do("renew a session lock", op)

    async def lock_token(self, user_id: str, session_id: str) -> int | None:
        sql = (
            f"SELECT lock_token FROM {self._t('sessions')} "
            "WHERE user_id=? AND session_id=? AND lock_expires > ?"
        )
        row = await self._do(
            "read a session lock",
            lambda: self._c.execute(sql, (user_id, session_id, time.time())).fetchone(),
        )
        return int(row[0]) if row and row[0] is not None else None

    # -------------------------------------------------------------------- replies
    def _start(self, c: sqlite3.Connection, reply: tuple[str, str, str], token: int) -> bool:
        """Mark ``reply`` running under ``token`` (inside a transaction)."""
        if not c.execute(
            f"UPDATE {self._t('sessions')} SET running_reply=? "
            "WHERE user_id=? AND session_id=? AND lock_token=?",
            (reply[2], reply[0], reply[1], token),
        ).rowcount:
            return False
        c.execute(
            f"INSERT INTO {self._t('replies')} "
            "(user_id, session_id, reply_id, status, token, created_at) "
            "VALUES (?, ?, ?, 'running', ?, ?)",
            (*reply, token, time.time()),
        )
        return True

    async def start_reply(self, user_id: str, session_id: str, reply_id: str, token: int) -> bool:
        def op() -> bool:
            with self._tx() as c:
                return self._start(c, (user_id, session_id, reply_id), token)

        return await self._do("start a reply", op)

    async def _append(
        self, key: st.ReplyKey, token: int, events: list[StoredEvent], final: ReplyStatus | None
    ) -> AppendResult:
        reply = (key.user_id, key.session_id, key.reply_id)

        def op() -> AppendResult:
            with self._tx() as c:
                row = c.execute(
                    f"SELECT r.last_seq, r.status, r.cancel FROM {self._t('replies')} r "
                    f"JOIN {self._t('sessions')} s "
                    "ON s.user_id = r.user_id AND s.session_id = r.session_id "
                    "WHERE r.user_id=? AND r.session_id=? AND r.reply_id=? "
                    "AND r.token=? AND s.lock_token=?",
                    (*reply, token, token),
                ).fetchone()
                if row is None:
                    return AppendResult(fenced=True)
                last, status, cancel = row
                if events[-1].seq <= last:  # a repeated append
                    return AppendResult(cancel_requested=bool(cancel))
                if status != "running" or events[0].seq != last + 1:
                    return AppendResult(fenced=True)
                c.executemany(
                    f"INSERT INTO {self._t('events')} VALUES (?, ?, ?, ?, ?, ?)",
                    [(*reply, e.seq, e.type, e.data) for e in events],
                )
                c.execute(
                    f"UPDATE {self._t('replies')} SET last_seq=?, status=COALESCE(?, status) "
                    "WHERE user_id=? AND session_id=? AND reply_id=?",
                    (events[-1].seq, final, *reply),
                )
                if final is not None:  # the session is free as the reply's end is stored
                    c.execute(
                        f"UPDATE {self._t('sessions')} "
                        "SET running_reply=NULL, lock_token=NULL, lock_expires=NULL "
                        "WHERE user_id=? AND session_id=?",
                        reply[:2],
                    )
                return AppendResult(cancel_requested=bool(cancel))

        result = await self._do("append reply events", op)
        self._notify()
        return result

    async def read_events(
        self, user_id: str, session_id: str, reply_id: str, after: int, wait: float
    ) -> list[StoredEvent]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            changed = self._changed  # taken before the read: an append in between wakes us
            found = await self._events_after(user_id, session_id, reply_id, after)
            left = deadline - loop.time()
            if found or left <= 0:
                return found
            try:  # woken by an append in this process; other processes' are polled
                await asyncio.wait_for(changed.wait(), min(left, POLL_EVERY))
            except TimeoutError:
                pass
