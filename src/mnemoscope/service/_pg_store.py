"""The service's shared state on PostgreSQL (asyncpg): any number of processes and machines.

Example::

    app = create_app("myapp:make_agent", store="postgresql://app@db:5432/app", auth=tokens)

Tables (``<p>`` is ``table_prefix``, default ``mnemoscope_svc``), created at start when
missing (under an advisory lock, so processes starting together do not race):

=====================  =================================================================
table                  holds
=====================  =================================================================
``<p>_sessions``       one row per ``(user_id, session_id)``; the lease: ``lock_token``
                       (fencing token from the sequence ``<p>_fence``), ``lock_expires``
                       (database clock, so machines' clocks never matter),
                       ``running_reply``
``<p>_replies``        one row per reply: ``status``, ``token``, ``last_seq``, ``cancel``
``<p>_events``         a reply's events, primary key ``(user_id, session_id, reply_id, seq)``
=====================  =================================================================

Every statement filters by ``user_id`` and ``session_id``. An append is one statement
that checks the lease token, inserts the events and moves ``last_seq`` (so it is atomic
and harmless to repeat), and notifies ``LISTEN <p>_events`` so readers in other
processes wake at once; readers also poll, so a lost notification only delays them. The
``LISTEN`` connection is re-opened when it drops (a server restart, a terminated backend),
after ``LISTEN_RETRY`` seconds, doubling; waiting readers then read again.

A session that is free and has no reply left running is taken with its new reply in one
statement; pooled connections are not reset after each call (this store leaves no session
state on them), so most calls are one round trip.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from mnemoscope._optional import require
from mnemoscope._redact import redact_text
from mnemoscope.errors import ServiceStoreError, UserError
from mnemoscope.service import _store as st
from mnemoscope.service._sql_store import SQL_TABLES, SQLStoreBase
from mnemoscope.service._store import AppendResult, ReplyStatus, StoredEvent

asyncpg = require("asyncpg", extra="sql", feature="PostgresServiceStore")

_DDL = (
    """
CREATE SEQUENCE IF NOT EXISTS {p}_fence;
"""
    + SQL_TABLES
)


_ACQUIRE = """
UPDATE {p}_sessions
SET lock_token = nextval('{p}_fence'),
    lock_expires = clock_timestamp() + $3 * interval '1 millisecond'
WHERE user_id = $1 AND session_id = $2
  AND (lock_token IS NULL OR lock_expires <= clock_timestamp())
RETURNING lock_token, running_reply
"""

_ACQUIRE_AND_START = """
WITH s AS (
    UPDATE {p}_sessions
    SET lock_token = nextval('{p}_fence'),
        lock_expires = clock_timestamp() + $3 * interval '1 millisecond',
        running_reply = $4
    WHERE user_id = $1 AND session_id = $2 AND running_reply IS NULL
      AND (lock_token IS NULL OR lock_expires <= clock_timestamp())
    RETURNING lock_token
), r AS (
    INSERT INTO {p}_replies (user_id, session_id, reply_id, status, token, created_at)
    SELECT $1, $2, $4, 'running', s.lock_token, $5 FROM s
    RETURNING 1
)
SELECT lock_token FROM s
"""
"""The common case of an acquire with a reply in one statement: the session is free and no
reply was left running (otherwise the acquire runs as a transaction of several steps)."""

_RECOVER = """
WITH r AS (
    UPDATE {p}_replies SET status = 'failed', last_seq = last_seq + 1
    WHERE user_id = $1 AND session_id = $2 AND reply_id = $3 AND status = 'running'
    RETURNING last_seq
), ins AS (
    INSERT INTO {p}_events (user_id, session_id, reply_id, seq, type, data)
    SELECT $1, $2, $3, r.last_seq, 'reply_failed', $4 FROM r
    RETURNING 1
), s AS (
    UPDATE {p}_sessions SET running_reply = NULL
    WHERE user_id = $1 AND session_id = $2 AND running_reply = $3
    RETURNING 1
)
SELECT (SELECT count(*) FROM ins) AS n,
       (SELECT count(*) FROM (SELECT pg_notify($5, $6) FROM ins) x) AS notified
"""

_HEARTBEAT = """
UPDATE {p}_sessions
SET lock_expires = clock_timestamp() + $4 * interval '1 millisecond'
WHERE user_id = $1 AND session_id = $2 AND lock_token = $3
RETURNING COALESCE((SELECT cancel FROM {p}_replies
                    WHERE user_id = $1 AND session_id = $2 AND reply_id = $5), false)
"""

_START = """
WITH s AS (
    UPDATE {p}_sessions SET running_reply = $3
    WHERE user_id = $1 AND session_id = $2 AND lock_token = $4
    RETURNING 1
)
INSERT INTO {p}_replies (user_id, session_id, reply_id, status, token, created_at)
SELECT $1, $2, $3, 'running', $4, $5 FROM s
RETURNING 1
"""

_APPEND = """
WITH r AS (
    SELECT r.last_seq, r.status, r.cancel
    FROM {p}_replies r
    JOIN {p}_sessions s ON s.user_id = r.user_id AND s.session_id = r.session_id
    WHERE r.user_id = $1 AND r.session_id = $2 AND r.reply_id = $3
      AND r.token = $4 AND s.lock_token = $4
    FOR UPDATE OF r
), ok AS (
    SELECT 1 AS go FROM r WHERE r.status = 'running' AND r.last_seq = $5::int - 1
), ins AS (
    INSERT INTO {p}_events (user_id, session_id, reply_id, seq, type, data)
    SELECT $1, $2, $3, e.seq, e.type, e.data
    FROM ok, unnest($6::int[], $7::text[], $8::text[]) AS e(seq, type, data)
    RETURNING 1
), upd AS (
    UPDATE {p}_replies SET last_seq = $9, status = COALESCE($10::text, status)
    WHERE user_id = $1 AND session_id = $2 AND reply_id = $3 AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), fin AS (
    UPDATE {p}_sessions SET running_reply = NULL, lock_token = NULL, lock_expires = NULL
    WHERE user_id = $1 AND session_id = $2 AND lock_token = $4
      AND $10::text IS NOT NULL AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
)
SELECT r.last_seq, r.cancel, EXISTS (SELECT 1 FROM ok) AS wrote,
       (SELECT count(*) FROM (SELECT pg_notify($11, $12) FROM ok) x) AS notified
FROM r
"""

LISTEN_RETRY = (0.1, 5.0)
"""Seconds before the first try to re-open a dropped ``LISTEN`` connection, and the most
between later tries (the wait doubles)."""

LISTEN_CHECK_EVERY = 30.0
"""Seconds between checks that the ``LISTEN`` connection still answers."""

_RETRYABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
)


class PostgresServiceStore(SQLStoreBase):
    """Sessions, reply logs and fenced session leases in PostgreSQL (see module docstring).

    Args:
        url: ``postgresql://user:pass@host:5432/db`` (``postgres://`` and SQLAlchemy's
            ``postgresql+asyncpg://`` are accepted).
        table_prefix: tables are ``<prefix>_sessions``, ``<prefix>_replies``, ``<prefix>_events``.
        pool_size: most connections this process opens (plus one for ``LISTEN``).
    """

    server_name = "PostgreSQL"
    dropped_errors = _RETRYABLE
    driver_errors = (asyncpg.PostgresError,)

    def __init__(self, url: str, *, table_prefix: str = "mnemoscope_svc", pool_size: int = 20):
        self._set_prefix(table_prefix)
        scheme, rest = url.split("://", 1)
        if scheme not in ("postgresql", "postgres", "postgresql+asyncpg"):
            raise UserError(f"PostgresServiceStore needs a postgresql:// URL, got {scheme}://")
        self.url = url
        self.dsn = "postgresql://" + rest
        self.pool_size = pool_size
        self.channel = f"{table_prefix}_events"
        self._pool: Any = None
        self._listener: Any = None
        self._listening: asyncio.Task[None] | None = None
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._sql = {
            name: sql.format(p=table_prefix)
            for name, sql in {
                "acquire": _ACQUIRE,
                "acquire_and_start": _ACQUIRE_AND_START,
                "recover": _RECOVER,
                "heartbeat": _HEARTBEAT,
                "start": _START,
                "append": _APPEND,
            }.items()
        }

    # ------------------------------------------------------------------ plumbing
    @property
    def url_safe(self) -> str:
        """The URL asyncpg connects to, secrets masked."""
        return redact_text(self.dsn)

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn,
                min_size=1,
                max_size=self.pool_size,
                command_timeout=30,
                reset=_rollback_if_in_transaction,
            )
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", self.channel)
                await conn.execute(_DDL.format(p=self.table_prefix))
        except (*_RETRYABLE, asyncpg.PostgresError) as exc:
            raise ServiceStoreError(f"PostgreSQL at {self.url_safe}: cannot open: {exc}") from exc
        dropped = await self._listen()
        self._listening = asyncio.create_task(
            self._keep_listening(dropped), name=f"{self.channel}-listen"
        )

    @property
    def listening(self) -> bool:
        """The ``LISTEN`` connection is up: readers in this process wake on appends made
        anywhere at once (while it is down they poll)."""
        return self._listener is not None and not self._listener.is_closed()

    async def _listen(self) -> asyncio.Event | None:
        """Open the ``LISTEN`` connection; an event set when it drops, or ``None`` when it
        could not be opened."""
        try:
            conn = await asyncpg.connect(self.dsn)
        except (*_RETRYABLE, asyncpg.PostgresError):
            return None
        dropped = asyncio.Event()
        conn.add_termination_listener(lambda _conn: dropped.set())
        try:
            await conn.add_listener(self.channel, self._notified)
        except (*_RETRYABLE, asyncpg.PostgresError):
            conn.terminate()
            return None
        self._listener = conn
        # what was notified while it was down is lost: every waiting reader reads again
        for waiters in self._waiters.values():
            for ev in waiters:
                ev.set()
        return dropped

    async def _keep_listening(self, dropped: asyncio.Event | None) -> None:
        """Re-open the ``LISTEN`` connection whenever it drops (the server restarted, the
        backend was terminated), waiting ``LISTEN_RETRY`` seconds, doubling, between tries;
        a connection that stops answering ``SELECT 1`` counts as dropped."""
        delay = LISTEN_RETRY[0]
        while self._listening is not None:
            if dropped is None:
                await asyncio.sleep(delay)
                delay = min(delay * 2, LISTEN_RETRY[1])
            else:
                delay = LISTEN_RETRY[0]
                while not dropped.is_set():
                    try:
                        await asyncio.wait_for(dropped.wait(), LISTEN_CHECK_EVERY)
                    except TimeoutError:
                        await self._check_listener()
                if self._listener is not None:
                    self._listener.terminate()
                    self._listener = None
            dropped = await self._listen()

    async def _check_listener(self) -> None:
        conn = self._listener
        try:
            await conn.fetchval("SELECT 1", timeout=LISTEN_CHECK_EVERY / 2)
        except (*_RETRYABLE, asyncpg.PostgresError, TimeoutError):
            conn.terminate()  # its termination listener sets ``dropped``

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        for ev in self._waiters.get(payload, ()):
            ev.set()

    async def aclose(self) -> None:
        if self._listening is not None:
            task, self._listening = self._listening, None
            # a cancel that lands as asyncpg's connect fails can be swallowed by the
            # driver's own timeout handling: cancel until the task is done
            while not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=0.1)
        if self._listener is not None:
            self._listener.terminate()
            self._listener = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def _do(self, what: str, op: Any, *, retry: bool = True) -> Any:
        if self._pool is None:
            await self.open()

        async def on_a_connection() -> Any:
            async with self._pool.acquire() as conn:
                return await op(conn)

        return await self._call(what, on_a_connection, retry=retry)

    async def _rows(self, what: str, sql: str, *args: Any) -> list[Any]:
        return list(await self._do(what, lambda c: c.fetch(sql, *args)))

    async def ping(self) -> None:
        await self._do("answer SELECT 1", lambda c: c.fetchval("SELECT 1"))

    # ------------------------------------------------------------------ sessions
    async def delete_session(self, user_id: str, session_id: str, token: int) -> bool:
        sql = (
            f"DELETE FROM {self._t('sessions')} "
            "WHERE user_id = $1 AND session_id = $2 AND lock_token = $3 RETURNING 1"
        )
        done = await self._do(
            "delete a session", lambda c: c.fetchval(sql, user_id, session_id, token)
        )
        return bool(done)

    # ---------------------------------------------------------------------- lock
    async def _acquire(
        self, key: st.SessionKey, ttl: float, failed_event: str, reply_id: str | None
    ) -> st.AcquireResult:
        user_id, session_id = key.user_id, key.session_id
        ms = max(1, int(ttl * 1000))

        async def op(conn: Any) -> st.AcquireResult:
            if reply_id is not None:
                token = await conn.fetchval(
                    self._sql["acquire_and_start"], user_id, session_id, ms, reply_id, time.time()
                )
                if token is not None:
                    return st.Acquired(int(token), None)
            async with conn.transaction():
                row = await conn.fetchrow(self._sql["acquire"], user_id, session_id, ms)
                if row is None:
                    held = await conn.fetchrow(
                        f"SELECT running_reply FROM {self._t('sessions')} "
                        "WHERE user_id = $1 AND session_id = $2",
                        user_id,
                        session_id,
                    )
                    return st.NoSession() if held is None else st.Busy(held[0])
                token, running = int(row[0]), row[1]
                if running is not None:
                    await conn.fetchrow(
                        self._sql["recover"],
                        user_id,
                        session_id,
                        running,
                        failed_event,
                        self.channel,
                        _key(user_id, session_id, running),
                    )
                if reply_id is not None:
                    await conn.fetchval(
                        self._sql["start"], user_id, session_id, reply_id, token, time.time()
                    )
                return st.Acquired(token, running)

        # not repeated: a retry after a lost answer would find our own lease and say busy
        result: st.AcquireResult = await self._do("take a session lock", op, retry=False)
        return result

    async def _heartbeat(
        self, key: st.SessionKey, token: int, ttl: float, reply_id: str | None
    ) -> AppendResult:
        args = (key.user_id, key.session_id, token, max(1, int(ttl * 1000)), reply_id or "")
        row = await self._do(
            "renew a session lock", lambda c: c.fetchrow(self._sql["heartbeat"], *args)
        )
        if row is None:
            return AppendResult(fenced=True)
        return AppendResult(cancel_requested=bool(row[0]))

    async def lock_token(self, user_id: str, session_id: str) -> int | None:
        sql = (
            f"SELECT lock_token FROM {self._t('sessions')} WHERE user_id = $1 AND session_id = $2 "
            "AND lock_token IS NOT NULL AND lock_expires > clock_timestamp()"
        )
        value = await self._do(
            "read a session lock", lambda c: c.fetchval(sql, user_id, session_id)
        )
        return int(value) if value is not None else None

    # -------------------------------------------------------------------- replies
    async def start_reply(self, user_id: str, session_id: str, reply_id: str, token: int) -> bool:
        now = time.time()
        done = await self._do(
            "start a reply",
            lambda c: c.fetchval(self._sql["start"], user_id, session_id, reply_id, token, now),
        )
        return bool(done)

    async def _append(
        self, key: st.ReplyKey, token: int, events: list[StoredEvent], final: ReplyStatus | None
    ) -> AppendResult:
        args = (
            key.user_id,
            key.session_id,
            key.reply_id,
            token,
            events[0].seq,
            [e.seq for e in events],
            [e.type for e in events],
            [e.data for e in events],
            events[-1].seq,
            final,
            self.channel,
            _key(key.user_id, key.session_id, key.reply_id),
        )
        row = await self._do(
            "append reply events", lambda c: c.fetchrow(self._sql["append"], *args)
        )
        if row is None:
            return AppendResult(fenced=True)
        last_seq, cancel, wrote = row[0], row[1], row[2]
        if not wrote and events[-1].seq > last_seq:
            return AppendResult(fenced=True)
        return AppendResult(cancel_requested=bool(cancel))

    async def read_events(
        self, user_id: str, session_id: str, reply_id: str, after: int, wait: float
    ) -> list[StoredEvent]:
        key = _key(user_id, session_id, reply_id)
        woken = asyncio.Event()
        if wait > 0:  # registered before the read, so a notification in between is not lost
            self._waiters.setdefault(key, set()).add(woken)
        try:
            found = await self._events_after(user_id, session_id, reply_id, after)
            if not found and wait > 0:
                try:
                    await asyncio.wait_for(woken.wait(), wait)
                except TimeoutError:
                    return []
                found = await self._events_after(user_id, session_id, reply_id, after)
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(woken)
                if not waiters:
                    del self._waiters[key]
        return found


async def _rollback_if_in_transaction(conn: Any) -> None:
    """The pool's reset of a released connection: this store leaves no session state on
    a pooled connection (no LISTEN, no session advisory lock, no SET), so the default reset
    (a round trip of ``RESET ALL``, ``UNLISTEN *``, ...) after every call is not needed."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


def _key(user_id: str, session_id: str, reply_id: str) -> str:
    return json.dumps([user_id, session_id, reply_id])
