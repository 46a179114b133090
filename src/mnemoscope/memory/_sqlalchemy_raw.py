"""One statement on a pooled driver connection, for the hot paths of
:class:`~mnemoscope.memory.AsyncSQLAlchemyMemory` (PostgreSQL ``asyncpg``, MariaDB
``aiomysql``).

A single-message ``add`` is one statement that commits itself (autocommit on PostgreSQL,
a compound statement with its own ``COMMIT`` on MariaDB). Through SQLAlchemy's
``AsyncConnection`` it also pays a ``Connection`` object, execution options, a result
wrapper and, on MariaDB, the pool's ``ROLLBACK`` when the connection goes back (one more
round trip, because the driver sends it whatever the transaction state). Here the statement
runs on the pool's connection itself (``AsyncEngine.raw_connection()``: the engine's pool,
size, ``pre_ping`` and events all apply), and the connection goes back without that
``ROLLBACK`` when the server says no transaction is open. Any other outcome takes the
pool's ordinary path: a server error rolls back on return, a lost or interrupted
connection is invalidated (closed and replaced).
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import QueuePool
from sqlalchemy.util import greenlet_spawn

from mnemoscope.memory._sqlalchemy_common import retrying, transient

_T = TypeVar("_T")

_MYSQL_CLIENT_ERRORS = 2000  # pymysql codes from 2000 on are the client's (connection lost)


def driver_error_code(exc: BaseException) -> tuple[str | None, int | None]:
    """``(sqlstate, mysql error number)`` of a driver exception (either may be ``None``)."""
    state = getattr(exc, "sqlstate", None)
    args = getattr(exc, "args", ())
    number = args[0] if args and isinstance(args[0], int) else None
    return (state if isinstance(state, str) else None), number


def server_error(exc: BaseException) -> bool:
    """An error the server reported on a healthy connection (not a lost connection)."""
    module = type(exc).__module__
    state, number = driver_error_code(exc)
    if module.startswith("asyncpg"):
        return state is not None and state[:2] not in ("08", "57")
    if module.startswith("pymysql"):
        return number is not None and 0 < number < _MYSQL_CLIENT_ERRORS
    return False


def transient_driver_error(exc: BaseException) -> bool:
    """Worth retrying: a lost connection, deadlock, lock timeout, serialization failure or
    concurrent duplicate (the same cases as ``transient`` for SQLAlchemy's wrappers)."""
    if isinstance(exc, (OSError, ConnectionError, EOFError)):
        return True
    module = type(exc).__module__
    if not module.startswith(("asyncpg", "pymysql")):
        return False
    state, number = driver_error_code(exc)
    if state and (state in ("40001", "40P01", "55P03") or state[:2] in ("08", "57", "23")):
        return True
    if number in (1062, 1205, 1213) or (number or 0) >= _MYSQL_CLIENT_ERRORS:
        return True
    return not server_error(exc)  # connection closed / interface errors


def _clean_asyncpg(conn: Any) -> bool:
    return not conn.is_in_transaction()


def _clean_aiomysql(conn: Any) -> bool:
    return not conn.get_transaction_status()


def _never(conn: Any) -> bool:
    return False


def transaction_probe(dialect_name: str, *, read: bool = False) -> Callable[[Any], bool]:
    """``probe(driver_connection)``: true when no transaction is open on it.

    PostgreSQL reports its transaction state after every statement. MySQL/MariaDB report
    an open *write* transaction, but not the one a plain ``SELECT`` starts under
    ``autocommit=0`` (SQLAlchemy's default for aiomysql): its snapshot would outlive the
    read and serve later reads on that connection stale rows, so after a read (``read``)
    the pool always rolls back. The write blocks end with ``COMMIT``/``ROLLBACK`` and read
    no table after it.
    """
    if dialect_name == "postgresql":
        return _clean_asyncpg
    return _never if read else _clean_aiomysql


class HeldConnection:
    """One driver connection of an engine's pool, kept checked out between the single
    statements of the write fast paths (one per engine, shared by its memories).

    Checking a connection out of SQLAlchemy's pool and back in costs two greenlet
    switches and the pool's bookkeeping on every add: a tenth of a one-row commit on a
    fast disk. The held connection skips both while it is free; a call that finds it busy
    (concurrent adds) takes a pool connection as before, so writers never wait for each
    other here. It is dropped (and the call retried on a pool connection) after any error,
    terminated when the engine is disposed or garbage-collected, and counts as one of the
    pool's connections meanwhile: engines whose pool cannot spare one (fewer than three
    connections) never hold one (:func:`held_connection`). Being checked out, it is not
    pinged (``pool_pre_ping``) nor recycled (``pool_recycle``) between adds: a connection
    the server closed fails the next add, which is retried on a pool connection.
    """

    def __init__(self) -> None:
        self.raw: Any = None
        self.busy = False
        self._dropped: Any = None

    def take(self) -> Any:
        """The held connection, now busy, or ``None`` (none yet, or in use)."""
        if self.raw is None or self.busy:
            return None
        self.busy = True
        return self.raw

    def keep(self, raw: Any) -> bool:
        """After a call that left ``raw`` clean: hold it (true), or let the caller return it
        to the pool (another connection is held, or the engine was disposed meanwhile)."""
        if raw is self._dropped:
            self._dropped = None
            return False
        if self.raw is None:
            self.raw = raw
        elif self.raw is not raw:
            return False
        self.busy = False
        return True

    def forget(self, raw: Any) -> None:
        """``raw`` failed: the caller closes or invalidates it."""
        if self.raw is raw:
            self.raw, self.busy = None, False

    def drop(self, *_: Any) -> None:
        """The engine is disposed (listener of ``engine_disposed``) or collected: terminate
        the idle held connection; one in use is returned by its call."""
        raw, self.raw = self.raw, None
        if raw is None:
            return
        if self.busy:
            self.busy, self._dropped = False, raw
            return
        try:
            raw.invalidate()  # terminates it and checks the empty record in
        except Exception:  # a finalizer at exit: the loop may be gone
            pass


_HELD: weakref.WeakKeyDictionary[Any, HeldConnection] = weakref.WeakKeyDictionary()


def held_connection(engine: AsyncEngine) -> HeldConnection | None:
    """The held connection slot of ``engine`` (created on first use); ``None`` when its
    pool has no connection to spare (a ``QueuePool`` of one connection: holding it would
    starve every other call) or does not keep connections (``NullPool`` and the like: the
    caller chose to have none open between calls)."""
    sync = engine.sync_engine
    held = _HELD.get(sync)
    if held is None:
        if not _spares_a_connection(sync.pool):
            return None
        held = _HELD[sync] = HeldConnection()
        event.listen(sync, "engine_disposed", held.drop)
        # not at exit: the loop is closed by then, and an engine never disposed leaves its
        # pool's connections unclosed anyway
        weakref.finalize(sync, held.drop).atexit = False
    return held


def _spares_a_connection(pool: Any) -> bool:
    if not isinstance(pool, QueuePool):
        return False
    overflow = pool._max_overflow  # -1: no limit
    return overflow < 0 or pool.size() + overflow >= 3


async def run_on_driver(
    engine: AsyncEngine,
    fn: Callable[[Any], Awaitable[_T]],
    clean: Callable[[Any], bool],
    *,
    hold: bool = False,
) -> _T:
    """``await fn(driver_connection)`` on a connection of ``engine``'s pool.

    The connection is returned without a reset when ``clean(driver_connection)`` says no
    transaction is open (with ``hold``, kept as the engine's :class:`HeldConnection`, and
    that one used when it is free); rolled back on return after a server error;
    invalidated after anything else (a lost connection, a cancellation mid-statement).
    Exceptions of ``fn`` propagate unchanged (driver exceptions: ``asyncpg`` /
    ``pymysql``).
    """
    held = held_connection(engine) if hold else None
    raw = None if held is None else held.take()
    if raw is None:
        raw = await engine.raw_connection()
    try:
        result = await fn(raw.driver_connection)
    except BaseException as exc:
        if held is not None:
            held.forget(raw)
        if server_error(exc):
            await greenlet_spawn(raw.close)  # the pool's reset: ROLLBACK
        else:
            await greenlet_spawn(raw.invalidate, exc if isinstance(exc, Exception) else None)
        raise
    is_clean = clean(raw.driver_connection)
    if held is not None:
        if is_clean and held.keep(raw):
            return result
        held.forget(raw)
    special = getattr(raw, "_close_special", None)  # SQLAlchemy's own "already reset"
    if special is not None and is_clean:
        await greenlet_spawn(special, transaction_reset=True)
    else:
        await greenlet_spawn(raw.close)
    return result


async def run_retrying(
    engine: AsyncEngine,
    fn: Callable[[Any], Awaitable[_T]],
    clean: Callable[[Any], bool],
    *,
    what: str,
    hold: bool = False,
) -> _T:
    """:func:`run_on_driver` through the store's one retry loop (``fn`` must be safe to
    repeat): a transient failure (checking a connection out of the pool, or the driver's
    own exceptions) is retried; anything else becomes
    :class:`~mnemoscope.errors.MemoryStoreError` naming ``what``."""

    def worth_retrying(exc: Exception) -> bool:
        if isinstance(exc, sa.exc.DBAPIError):
            return transient(exc)
        return transient_driver_error(exc)

    return await retrying(
        lambda: run_on_driver(engine, fn, clean, hold=hold),
        catch=Exception,
        transient=worth_retrying,
        what=what,
    )


def fetch_value(sql: str, args: tuple[Any, ...]) -> Callable[[Any], Awaitable[int]]:
    """``fn(asyncpg connection)``: run ``sql`` and return its one integer value."""

    async def run(conn: Any) -> int:
        return int(await conn.fetchval(sql, *args))

    return run


def fetch_one(sql: str, args: tuple[Any, ...]) -> Callable[[Any], Awaitable[int]]:
    """``fn(aiomysql connection)``: run ``sql`` (a MariaDB block that commits itself) and
    return the integer of its one-row result."""

    async def run(conn: Any) -> int:
        cur = await conn.cursor()
        try:
            await cur.execute(sql, args)
            row = await cur.fetchone()
        finally:
            await cur.close()  # reads the block's remaining results
        return int(row[0])

    return run


def fetch_all(
    sql: str, args: tuple[Any, ...], *, numeric: bool
) -> Callable[[Any], Awaitable[list[Any]]]:
    """``fn(connection)``: the rows of a read, on asyncpg (``numeric``) or aiomysql."""
    if numeric:

        async def records(conn: Any) -> list[Any]:
            return list(await conn.fetch(sql, *args))

        return records

    async def rows(conn: Any) -> list[Any]:
        cur = await conn.cursor()
        try:
            await cur.execute(sql, args)
            return list(await cur.fetchall())
        finally:
            await cur.close()

    return rows
