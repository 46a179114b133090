"""SQLite fast path of :class:`~mnemoscope.memory.AsyncSQLAlchemyMemory`.

SQLAlchemy's aiosqlite adapter hands every statement, fetch, ``BEGIN`` and ``COMMIT`` to
the driver's thread and back (about a dozen thread hops for one ``add``). Here a whole
write (``BEGIN IMMEDIATE``, counter bump, inserts, marks, ``COMMIT``) is one function run
by one worker thread on a plain :mod:`sqlite3` connection: one hop per call. ``delete``,
``delete_by_mark`` and ``clear`` run the same way (messages and marks in one transaction). The file,
tables, locking (``BEGIN IMMEDIATE``, busy timeout) and transaction boundaries are the
same as on the SQLAlchemy path, so both paths, and other processes, can share a file.
:class:`SQLiteDialect` is the memory's strategy for such a file.
"""

from __future__ import annotations

import asyncio
import atexit
import queue
import sqlite3
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from mnemoscope.memory._base import MarkPlan, mark_pairs
from mnemoscope.memory._sqlalchemy_common import chunks, plan_add, read_sql, retrying
from mnemoscope.memory._sqlalchemy_dialect import SessionRows, SqlDialect

_T = TypeVar("_T")

SQLITE_BUSY_TIMEOUT_MS = 30_000
# engines built by AsyncSQLAlchemyMemory.create_engine (WAL, busy timeout, BEGIN IMMEDIATE)
CONFIGURED: weakref.WeakSet[Any] = weakref.WeakSet()


def configure_sqlite(sync_engine: Any) -> None:
    """WAL, busy timeout, and ``BEGIN IMMEDIATE`` for write transactions."""

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get("mnemoscope_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    CONFIGURED.add(sync_engine)


class SQLiteWorker:
    """One plain ``sqlite3`` connection to a database file and the one thread using it.

    Args:
        path: the database file (or a ``file:`` URI when ``uri`` is true).
        uri: open ``path`` as an SQLite URI.
        configure: set WAL and ``synchronous=NORMAL`` as engines built by
            ``AsyncSQLAlchemyMemory.create_engine`` do (a busy timeout is always set).
        busy_timeout_ms: how long a write waits for another writer's lock.
    """

    def __init__(self, path: str, *, uri: bool, configure: bool, busy_timeout_ms: int) -> None:
        self._path, self._uri, self._configure = path, uri, configure
        self._busy_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        # a SimpleQueue, not a ThreadPoolExecutor: its put takes no lock, so close() is
        # safe from a finalizer that the garbage collector runs in the middle of other
        # code (an executor's submit holds a module-wide lock: a finalizer calling
        # submit inside a submit deadlocked the thread, and with it the process)
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._closed = False

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self._path,
                uri=self._uri,
                isolation_level=None,  # we emit BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,  # only ever used by our one thread
                timeout=self._busy_ms / 1000,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_ms)}")
            if self._configure:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            self._conn = conn
        return self._conn

    def _serve(self) -> None:
        """The worker thread: run jobs in order until :meth:`close` queues the end."""
        while True:
            job = self._jobs.get()
            if job is None:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                self._refuse_late_jobs()
                return
            fn, args, loop, future = job
            try:
                result = fn(self._connection(), *args)
            except BaseException as exc:  # handed to the awaiting coroutine
                _settle_soon(loop, future, None, exc)
            else:
                _settle_soon(loop, future, result, None)

    def _refuse_late_jobs(self) -> None:
        # a job queued behind the end (a close racing a call) fails instead of waiting
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                error = RuntimeError(f"the SQLite worker of {self._path!r} is closed")
                _settle_soon(job[2], job[3], None, error)

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(connection, *args)`` in the worker thread."""
        if self._closed:
            raise RuntimeError(f"the SQLite worker of {self._path!r} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    thread = threading.Thread(
                        target=self._serve, name="mnemoscope-sqlite", daemon=True
                    )
                    thread.start()
                    self._thread = thread
                    _RUNNING.add(self)
        self._jobs.put((fn, args, loop, future))
        result: _T = await future
        return result

    def close(self, wait: float | None = None) -> None:
        """Close the connection (in its thread) once queued work is done, then end the
        thread. Idempotent; safe from a finalizer. ``wait``: seconds to wait for that."""
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
        thread = self._thread
        if wait is not None and thread is not None and thread is not threading.current_thread():
            thread.join(wait)


_Job = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


def _settle_soon(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
) -> None:
    def settle() -> None:
        if future.done():  # the awaiting task was cancelled
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


# workers with a thread; at exit each finishes its queued work and closes its connection
_RUNNING: weakref.WeakSet[SQLiteWorker] = weakref.WeakSet()


@atexit.register
def _close_running() -> None:
    for worker in list(_RUNNING):
        worker.close(wait=5.0)


# one worker per engine: memories of many sessions on one engine share it
_WORKERS: weakref.WeakKeyDictionary[Any, SQLiteWorker | None] = weakref.WeakKeyDictionary()


def sqlite_worker_for(
    sync_engine: Any, *, configured: bool, busy_timeout_ms: int
) -> SQLiteWorker | None:
    """The engine's worker, or ``None`` when the database is not a plain file.

    In-memory databases (one per connection) and engines that build connections
    themselves (a ``creator``) keep the SQLAlchemy path.
    """
    if sync_engine in _WORKERS:
        return _WORKERS[sync_engine]
    url = sync_engine.url
    database = url.database or ""
    query = dict(url.query)
    uri = str(query.pop("uri", "")).lower() in ("true", "1")
    worker: SQLiteWorker | None = None
    memory = database in ("", ":memory:") or "mode=memory" in database
    if not memory and not query:
        worker = SQLiteWorker(
            database, uri=uri, configure=configured, busy_timeout_ms=busy_timeout_ms
        )
        weakref.finalize(sync_engine, worker.close)
    _WORKERS[sync_engine] = worker
    return worker


async def close_worker(sync_engine: Any, wait: float = 5.0) -> None:
    """Close the engine's worker and wait (at most ``wait`` seconds) until its connection is
    closed: the last connection to a WAL database removes its ``-wal`` and ``-shm`` files,
    which a process that exits right after ``aclose()`` must not leave behind."""
    worker = _WORKERS.pop(sync_engine, None)
    if worker is not None:
        # the join runs in a helper thread, so the event loop is never blocked by it
        await asyncio.to_thread(worker.close, wait)


def _in(n: int) -> str:
    return f"IN ({','.join('?' * n)})"


def _write(conn: sqlite3.Connection, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(conn, *args)`` as one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn, *args)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _add(
    conn: sqlite3.Connection,
    prefix: str,
    user: str,
    session: str,
    payload: list[tuple[str, str]],
    marks: MarkPlan,
    on_duplicate: str,
) -> int:
    """The whole of ``add`` (inside the caller's transaction); how many were new."""
    msgs, mark_table, sessions = f"{prefix}_messages", f"{prefix}_marks", f"{prefix}_sessions"
    existing: dict[str, int] = {}
    ids = list(dict.fromkeys(i for i, _ in payload))
    for chunk in chunks(ids):
        rows = conn.execute(
            f"SELECT msg_id, seq FROM {msgs} WHERE user_id = ? AND session_id = ? "
            f"AND msg_id {_in(len(chunk))}",
            (user, session, *chunk),
        )
        existing.update(rows)
    new, replace = plan_add(payload, existing, on_duplicate)
    seqs: dict[str, int] = {}
    if new:
        row = conn.execute(
            f"UPDATE {sessions} SET last_seq = last_seq + ? "
            "WHERE user_id = ? AND session_id = ? RETURNING last_seq",
            (len(new), user, session),
        ).fetchone()
        if row is None:
            conn.execute(
                f"INSERT INTO {sessions} (user_id, session_id, last_seq) VALUES (?, ?, ?)",
                (user, session, len(new)),
            )
            last = len(new)
        else:
            last = int(row[0])
        first = last - len(new) + 1
        seqs = {i: first + n for n, i in enumerate(new)}
        conn.executemany(
            f"INSERT INTO {msgs} (user_id, session_id, seq, msg_id, msg_json) "
            "VALUES (?, ?, ?, ?, ?)",
            [(user, session, seqs[i], i, d) for i, d in new.items()],
        )
    if replace:
        conn.executemany(
            f"UPDATE {msgs} SET msg_json = ? WHERE user_id = ? AND session_id = ? AND msg_id = ?",
            [(d, user, session, i) for i, d in replace.items()],
        )
        for chunk in chunks(list(replace)):
            conn.execute(
                f"DELETE FROM {mark_table} WHERE user_id = ? AND session_id = ? "
                f"AND msg_id {_in(len(chunk))}",
                (user, session, *chunk),
            )
        seqs.update((i, existing[i]) for i in replace)
    pairs = mark_pairs(marks, seqs) if seqs else []
    if pairs:
        conn.executemany(
            f"INSERT INTO {mark_table} (user_id, session_id, msg_id, mark, seq) "
            "VALUES (?, ?, ?, ?, ?)",
            [(user, session, i, m, seqs[i]) for i, m in pairs],
        )
    return len(new)


def _delete_ids(
    conn: sqlite3.Connection, prefix: str, user: str, session: str, ids: list[str]
) -> int:
    """Delete the messages ``ids`` and all their marks (inside the caller's transaction)."""
    deleted = 0
    for chunk in chunks(ids):  # messages first, then marks, as on the other databases
        args = (user, session, *chunk)
        deleted += conn.execute(
            f"DELETE FROM {prefix}_messages WHERE user_id = ? AND session_id = ? "
            f"AND msg_id {_in(len(chunk))}",
            args,
        ).rowcount
        conn.execute(
            f"DELETE FROM {prefix}_marks WHERE user_id = ? AND session_id = ? "
            f"AND msg_id {_in(len(chunk))}",
            args,
        )
    return deleted


def _delete_by_mark(
    conn: sqlite3.Connection, prefix: str, user: str, session: str, marks: list[str]
) -> int:
    """Find the marked messages and delete them (inside the caller's transaction)."""
    rows = conn.execute(
        f"SELECT DISTINCT msg_id FROM {prefix}_marks WHERE user_id = ? AND session_id = ? "
        f"AND mark {_in(len(marks))}",
        (user, session, *marks),
    )
    return _delete_ids(conn, prefix, user, session, [r[0] for r in rows])


def _clear(conn: sqlite3.Connection, prefix: str, user: str, session: str) -> None:
    # the counter row stays (positions are never reused in a session); BEGIN IMMEDIATE
    # already serialises writers
    for table in ("messages", "marks"):
        conn.execute(
            f"DELETE FROM {prefix}_{table} WHERE user_id = ? AND session_id = ?", (user, session)
        )


def read_sync(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[Any]:
    """The rows of one read statement (``get``), in the worker thread."""
    return conn.execute(sql, args).fetchall()


def retryable(exc: sqlite3.Error) -> bool:
    """A locked or busy file, or a concurrent duplicate insert: safe to run again."""
    if isinstance(exc, sqlite3.IntegrityError):
        return True
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SQLiteDialect(SqlDialect):
    """A SQLite file: ``add``, ``delete``, ``delete_by_mark``, ``clear`` and ``get`` are
    one call of the engine's worker thread each, retried while the file is locked; the
    other operations take the portable path on the same file.

    Args:
        engine: the memory's engine.
        rows: the tables and the session they are scoped to.
        worker: the engine's worker (:func:`sqlite_worker_for`).
    """

    def __init__(self, engine: AsyncEngine, rows: SessionRows, worker: SQLiteWorker) -> None:
        super().__init__(engine, rows)
        self.worker = worker
        self._key = (rows.prefix, rows.user_id, rows.session_id)

    async def _run(self, fn: Callable[..., _T], *args: Any, what: str) -> _T:
        """``fn(sqlite3_connection, *args)`` in the worker, retried while locked."""
        return await retrying(
            lambda: self.worker.run(fn, *args),
            catch=sqlite3.Error,
            transient=retryable,
            what=f"AsyncSQLAlchemyMemory.{what}",
        )

    async def _run_write(self, fn: Callable[..., _T], *args: Any, what: str) -> _T:
        """``fn(connection, prefix, user, session, *args)`` as one ``BEGIN IMMEDIATE``
        ... ``COMMIT`` transaction in the worker, retried while locked."""
        return await self._run(_write, fn, *self._key, *args, what=what)

    async def add(self, payload: list[tuple[str, str]], plan: MarkPlan, on_duplicate: str) -> int:
        return await self._run_write(_add, payload, plan, on_duplicate, what="add")

    async def delete(self, ids: list[str]) -> int:
        return await self._run_write(_delete_ids, ids, what="delete")

    async def delete_by_mark(self, marks: list[str]) -> int:
        return await self._run_write(_delete_by_mark, marks, what="delete_by_mark")

    async def clear(self) -> None:
        await self._run_write(_clear, what="clear")

    async def read(self, want: list[str], skip: list[str], last_n: int | None) -> list[Any]:
        sql, params = read_sql(self.rows.prefix, "qmark", len(want), len(skip), last_n is not None)
        args = params(self.rows.user_id, self.rows.session_id, want, skip, last_n or 0)
        return await self._run(read_sync, sql, args, what="get")
