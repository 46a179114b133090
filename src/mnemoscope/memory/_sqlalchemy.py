"""Session store in a SQL database through SQLAlchemy's asyncio API.

Example::

    memory = AsyncSQLAlchemyMemory("sqlite+aiosqlite:///sessions.db", session_id="s1")
    await memory.add(UserMsg("alice", "hi"), marks="greeting")
    await memory.get(marks="greeting")
    await memory.aclose()  # disposes the engine it created; never one you passed in

Drivers: SQLite (``sqlite+aiosqlite:///path.db``, the embedded default), PostgreSQL
(``postgresql+asyncpg://user:pw@host/db``), MySQL/MariaDB (``mysql+aiomysql://...``).
Tables are created on first use:

``<prefix>_sessions``
    ``(user_id, session_id)`` primary key, ``last_seq``: the session's position counter.
``<prefix>_messages``
    ``user_id``, ``session_id``, ``seq`` (position in the session), ``msg_id``,
    ``msg_json`` (exactly ``Msg.model_dump_json()``); primary key
    ``(user_id, session_id, seq)``, unique ``(user_id, session_id, msg_id)``.
``<prefix>_marks``
    ``(user_id, session_id, msg_id, mark)`` primary key, ``seq`` (the message's, copied
    so that reading by mark is one index range plus primary-key lookups), index
    ``(user_id, session_id, mark, seq)``.

Ids, user and session ids and marks are limited to 128 characters (MySQL index limits).
They compare exactly on every database: on MySQL/MariaDB their columns use a binary NO PAD
collation (``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on MySQL 8), so
``"alice"`` and ``"alice "`` are different users. Tables of the older ``utf8mb4_bin``
schema (which ignores trailing spaces) are refused with the ``ALTER TABLE`` statements that
convert them; :meth:`AsyncSQLAlchemyMemory.upgrade_tables` runs them.

Positions are never reused within a session: ``clear`` deletes the messages and marks but
keeps the counter row, so a mark row written by a writer racing ``clear`` can never attach
to a later message. ``update_marks`` locks the message rows it marks (``FOR UPDATE``), and
deletes remove messages before their marks, so such a mark row is deleted with its message.

Ordering across processes: an ``add`` takes a block of positions by incrementing the
session's ``last_seq`` row, which also locks it until the transaction commits. Writers of
one session are therefore serialised (a batch's positions are contiguous, and commit order
is position order) while different sessions never wait for each other. Every write is one
transaction (a batch is stored entirely or not at all). SQLite engines built here use
WAL, a busy timeout and ``BEGIN IMMEDIATE`` for writes, so several processes can share one
file.

Fast paths (same tables, same locks): on a SQLite file an ``add``, ``delete``,
``delete_by_mark`` or ``clear`` runs entirely (``BEGIN IMMEDIATE`` ... ``COMMIT``) as one
call of a worker thread on a plain ``sqlite3`` connection (``_sqlalchemy_sqlite``); on
PostgreSQL ``add(..., on_duplicate="ignore")`` is one data-modifying statement in
autocommit (``_sqlalchemy_pg``); on MariaDB it is one anonymous compound statement that
runs its own transaction (``_sqlalchemy_mysql``). Those statements, and ``get``, run on the
pooled driver connection itself, returned without the pool's reset ``ROLLBACK`` when no
transaction is open (``_sqlalchemy_raw``); ``get`` decodes all rows in one validation.

A dropped connection, a deadlock or a locked SQLite file is retried; only when the
connection drops *during* ``COMMIT`` of ``add(..., on_duplicate="error")`` (outcome unknown)
does the caller get :class:`~mnemoscope.errors.MemoryStoreError`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import weakref
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from mnemoscope._optional import require
from mnemoscope.errors import MemoryStoreError, MissingExtraError, UserError
from mnemoscope.memory._base import (
    AddMarks,
    MarkPlan,
    Marks,
    MemoryBase,
    MemoryState,
    OnCorrupt,
    OnDuplicate,
    StoredMsg,
    decode_rows,
    dump_msgs,
    mark_pairs,
    normalize_ids,
    normalize_marks,
    prepare_add,
)
from mnemoscope.message import Msg

require("sqlalchemy.ext.asyncio", extra="sql", feature="AsyncSQLAlchemyMemory")

import sqlalchemy as sa  # noqa: E402 (after the extra check)
from sqlalchemy.ext.asyncio import (  # noqa: E402
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from mnemoscope.memory import _sqlalchemy_mysql as mariadb  # noqa: E402
from mnemoscope.memory._sqlalchemy_common import (  # noqa: E402 (needs sqlalchemy)
    MYSQL_KEY_COLLATION,
    check_key,
    chunks,
    first_occurrences,
    make_tables,
    plan_add,
    read_sql,
    transient,
)
from mnemoscope.memory._sqlalchemy_pg import (  # noqa: E402
    PgAddSql,
    add_ignore_sql,
    pg_add_statement,
)
from mnemoscope.memory._sqlalchemy_raw import (  # noqa: E402
    fetch_all,
    fetch_one,
    fetch_value,
    run_retrying,
    transaction_probe,
)
from mnemoscope.memory._sqlalchemy_sqlite import (  # noqa: E402
    CONFIGURED,
    SQLITE_BUSY_TIMEOUT_MS,
    SQLiteWorker,
    add_sync,
    clear_sync,
    close_worker,
    configure_sqlite,
    delete_by_mark_sync,
    delete_sync,
    read_sync,
    sqlite_worker_for,
)
from mnemoscope.memory._sqlalchemy_sqlite import retryable as sqlite_retryable  # noqa: E402

DEFAULT_URL = "sqlite+aiosqlite:///mnemoscope_memory.db"
"""Used when no engine or URL is given: a file in the current directory."""

_ATTEMPTS = 5  # transient errors (locked file, deadlock, concurrent duplicate insert)
_T = TypeVar("_T")


# engines whose tables exist, per table prefix (one check per engine and process)
_READY: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

# synchronous drivers people type out of habit -> the asyncio URL scheme to use instead
_ASYNC_SCHEMES = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
    "mysql": "mysql+aiomysql",
    "mariadb": "mysql+aiomysql",
}
_SYNC_DRIVERS = {
    "postgresql": {"", "psycopg2", "psycopg2cffi", "pg8000", "pygresql"},
    "postgres": {"", "psycopg2"},
    "sqlite": {"", "pysqlite", "pysqlcipher"},
    "mysql": {"", "pymysql", "mysqldb", "mysqlconnector", "cymysql", "mariadbconnector"},
    "mariadb": {"", "pymysql", "mysqldb", "mysqlconnector", "mariadbconnector"},
}


def _sync_url_error(url: str) -> UserError | None:
    """A clear error for a URL naming a synchronous driver (``postgresql://``, ``sqlite:///``)."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return None
    backend, _, driver = parsed.drivername.partition("+")
    if driver not in _SYNC_DRIVERS.get(backend, ()):
        return None
    suggestion = parsed.set(drivername=_ASYNC_SCHEMES[backend])
    return UserError(
        f"AsyncSQLAlchemyMemory needs an asyncio driver, and {parsed.drivername}:// is a "
        f"synchronous one: use {suggestion.render_as_string(hide_password=True)} "
        "(the drivers asyncpg, aiosqlite and aiomysql come with pip install 'mnemoscope[sql]')"
    )


class _CommitFailedError(Exception):
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class AsyncSQLAlchemyMemory(MemoryBase):
    """Session store in SQLite, PostgreSQL or MySQL/MariaDB.

    Args:
        engine_or_session: an ``AsyncEngine``, an ``async_sessionmaker`` or ``AsyncSession``
            bound to one (its engine is used), or a database URL. Engines you pass are never
            disposed by this object; one engine can serve many sessions.
        url: a database URL, as an alternative to ``engine_or_session``. With neither,
            ``sqlite+aiosqlite:///mnemoscope_memory.db`` (current directory) is used.
        user_id: whose session this is.
        session_id: which session of that user.
        table_prefix: tables are ``<prefix>_messages`` and ``<prefix>_marks``.
        **engine_kwargs: passed to ``create_async_engine`` when building an engine.

    Raises:
        UserError: an unsupported ``engine_or_session``, both it and ``url``, ids longer
            than 128 characters, or a ``table_prefix`` that is not an identifier.
    """

    def __init__(
        self,
        engine_or_session: AsyncEngine | async_sessionmaker[Any] | AsyncSession | str | None = None,
        *,
        url: str | None = None,
        user_id: str = "default",
        session_id: str = "default",
        table_prefix: str = "mnemoscope",
        **engine_kwargs: Any,
    ) -> None:
        super().__init__(user_id=user_id, session_id=session_id)
        check_key("user_id", user_id)
        check_key("session_id", session_id)
        if not table_prefix.isidentifier():
            raise UserError(
                f"AsyncSQLAlchemyMemory: table_prefix must be an identifier, got {table_prefix!r}"
            )
        if engine_or_session is not None and url is not None:
            raise UserError("AsyncSQLAlchemyMemory: pass engine_or_session or url=, not both")
        source = url if engine_or_session is None else engine_or_session
        self._owns_engine = False
        if source is None or isinstance(source, str):
            self.engine = self.create_engine(source or DEFAULT_URL, **engine_kwargs)
            self._owns_engine = True
        elif engine_kwargs:
            raise UserError("AsyncSQLAlchemyMemory: engine options need a URL, not an engine")
        elif isinstance(source, AsyncEngine):
            self.engine = source
        elif isinstance(source, (async_sessionmaker, AsyncSession)):
            bind = source.kw.get("bind") if isinstance(source, async_sessionmaker) else source.bind
            if not isinstance(bind, AsyncEngine):
                raise UserError(
                    "AsyncSQLAlchemyMemory: the session factory must be bound to an AsyncEngine "
                    "(async_sessionmaker(bind=engine))"
                )
            self.engine = bind
        else:
            raise UserError(
                "AsyncSQLAlchemyMemory: engine_or_session must be an AsyncEngine, an "
                f"async_sessionmaker, an AsyncSession or a URL string, got {type(source).__name__}"
            )
        self.table_prefix = table_prefix
        self.sessions, self.messages, self.marks = make_tables(table_prefix)
        self._dialect = self.engine.dialect.name
        self._init_lock = asyncio.Lock()
        self._sqlite: SQLiteWorker | None = None
        if self._dialect == "sqlite":
            sync = self.engine.sync_engine
            self._sqlite = sqlite_worker_for(
                sync, configured=sync in CONFIGURED, busy_timeout_ms=SQLITE_BUSY_TIMEOUT_MS
            )
        self._add_ignore_sql = add_ignore_sql(table_prefix)
        self._pg_sql = PgAddSql(table_prefix)
        # the hot paths run on the pooled driver connection itself (``_sqlalchemy_raw``)
        driver = self.engine.dialect.driver
        self._driver_fast = (self._dialect, driver) in (
            ("postgresql", "asyncpg"),
            ("mysql", "aiomysql"),
            ("mariadb", "aiomysql"),
        )
        self._clean = transaction_probe(self._dialect)
        self._clean_after_read = transaction_probe(self._dialect, read=True)
        self._key = (table_prefix, user_id, session_id)  # of the SQLite fast path's functions

    @staticmethod
    def create_engine(url: str, **engine_kwargs: Any) -> AsyncEngine:
        """An engine configured for this store (SQLite: WAL, busy timeout, BEGIN IMMEDIATE).

        Share one engine between the memories of many sessions in a process:
        ``AsyncSQLAlchemyMemory(engine, session_id=sid)``.
        """
        sync_error = _sync_url_error(url) if isinstance(url, str) else None
        if sync_error is not None:
            raise sync_error
        try:
            engine = create_async_engine(url, **engine_kwargs)
        except sa.exc.InvalidRequestError as exc:  # another synchronous driver
            raise UserError(
                f"AsyncSQLAlchemyMemory needs an asyncio driver (postgresql+asyncpg://, "
                f"sqlite+aiosqlite:///, mysql+aiomysql://): {exc}"
            ) from exc
        except ImportError as exc:
            raise MissingExtraError(
                f"AsyncSQLAlchemyMemory requires the 'sql' extra: pip install 'mnemoscope[sql]' "
                f"(the driver for {url.split(':', 1)[0]!r} is missing: {exc})"
            ) from exc
        except sa.exc.ArgumentError as exc:
            raise UserError(f"AsyncSQLAlchemyMemory: invalid database URL: {exc}") from exc
        if engine.dialect.name == "sqlite":
            configure_sqlite(engine.sync_engine)
        return engine

    # ------------------------------------------------------------------ plumbing
    def _where(self, table: sa.Table) -> sa.ColumnElement[bool]:
        return sa.and_(table.c.user_id == self.user_id, table.c.session_id == self.session_id)

    async def _ensure_tables(self) -> None:
        ready = _READY.setdefault(self.engine.sync_engine, set())
        if self.table_prefix in ready:
            return
        async with self._init_lock:
            if self.table_prefix in ready:
                return
            pending = await self._prepare_tables(upgrade=False)
            if pending:
                statements = ";\n  ".join(pending)
                raise UserError(
                    f"AsyncSQLAlchemyMemory: the tables {self.table_prefix}_* have the older "
                    "MySQL/MariaDB schema whose id and mark columns ignore trailing spaces "
                    "(collation utf8mb4_bin pads them, so user 'alice ' would read the "
                    "session of 'alice'). Nothing was changed and no data is lost. Convert "
                    "them once, with the other writers stopped: await memory.upgrade_tables(), "
                    f"or run:\n  {statements};"
                )
            ready.add(self.table_prefix)

    async def _prepare_tables(self, *, upgrade: bool) -> list[str]:
        """Create missing tables; return the ``ALTER TABLE`` statements that an older schema
        needs (MySQL/MariaDB), after running them when ``upgrade`` is true."""
        for attempt in range(3):
            try:
                async with self.engine.begin() as conn:
                    mysql = conn.dialect.name in ("mysql", "mariadb")
                    # the server is known once connected; ids need its NO PAD collation
                    collation = (
                        mariadb.key_collation(conn.dialect) if mysql else MYSQL_KEY_COLLATION
                    )
                    _, messages, _ = make_tables(self.table_prefix, collation)
                    await conn.run_sync(messages.metadata.create_all, checkfirst=True)
                    if not mysql:
                        return []
                    names = tuple(f"{self.table_prefix}_{n}" for n in mariadb.KEY_COLUMNS)
                    result = await conn.exec_driver_sql(mariadb.KEY_COLUMNS_SQL, names)
                    rows: list[Any] = list(result)
                    columns = [(str(r[0]), str(r[1]), r[2]) for r in rows]
                    pending = mariadb.upgrade_statements(self.table_prefix, collation, columns)
                    if upgrade:
                        for statement in pending:
                            await conn.exec_driver_sql(statement)
                    return pending
            except sa.exc.DBAPIError as exc:
                # another process created them between our check and CREATE
                if attempt == 2:
                    raise MemoryStoreError(
                        f"AsyncSQLAlchemyMemory: cannot create tables: {exc}"
                    ) from exc
                await asyncio.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    async def upgrade_tables(self) -> list[str]:
        """Convert tables of an older schema in place; returns the statements it ran.

        On MySQL/MariaDB, stores created before ids compared exactly have id and mark
        columns in ``utf8mb4_bin``, which ignores trailing spaces; they are converted to the
        NO PAD binary collation (every stored row is kept: converting only makes more ids
        distinct). Other databases, and tables already converted, need nothing: ``[]``.
        Run it once with the other writers stopped (``ALTER TABLE`` rebuilds the tables).
        """
        async with self._init_lock:
            done = await self._prepare_tables(upgrade=True)
            _READY.setdefault(self.engine.sync_engine, set()).add(self.table_prefix)
        return done

    async def _run(
        self,
        work: Callable[[AsyncConnection], Awaitable[_T]],
        *,
        write: bool | str,
        idempotent: bool = True,
        what: str,
    ) -> _T:
        await self._ensure_tables()
        for attempt in range(_ATTEMPTS):
            try:
                return await self._once(work, write)
            except _CommitFailedError as failed:
                exc = failed.exc
                if not idempotent:
                    raise MemoryStoreError(
                        f"AsyncSQLAlchemyMemory.{what}: the connection failed during COMMIT "
                        f"({exc}); the batch was stored entirely or not at all, check with "
                        "get_marks()"
                    ) from exc
                if not isinstance(exc, sa.exc.DBAPIError) or not transient(exc):
                    raise MemoryStoreError(f"AsyncSQLAlchemyMemory.{what} failed: {exc}") from exc
                last: BaseException = exc
            except sa.exc.DBAPIError as exc:
                if not transient(exc):
                    raise MemoryStoreError(f"AsyncSQLAlchemyMemory.{what} failed: {exc}") from exc
                last = exc
            except (OSError, ConnectionError) as exc:
                last = exc
            if attempt + 1 < _ATTEMPTS:
                await asyncio.sleep(0.01 * 2**attempt)
        raise MemoryStoreError(
            f"AsyncSQLAlchemyMemory.{what} failed after {_ATTEMPTS} attempts: {last}"
        ) from last

    async def _run_sqlite(self, fn: Callable[..., _T], *args: Any, what: str) -> _T:
        """``fn(sqlite3_connection, *args)`` in the SQLite worker, retried while locked."""
        assert self._sqlite is not None
        await self._ensure_tables()
        for attempt in range(_ATTEMPTS):
            try:
                return await self._sqlite.run(fn, *args)
            except sqlite3.Error as exc:
                if not sqlite_retryable(exc):
                    raise MemoryStoreError(f"AsyncSQLAlchemyMemory.{what} failed: {exc}") from exc
                last = exc
            if attempt + 1 < _ATTEMPTS:
                await asyncio.sleep(0.01 * 2**attempt)
        raise MemoryStoreError(
            f"AsyncSQLAlchemyMemory.{what} failed after {_ATTEMPTS} attempts: {last}"
        ) from last

    async def _once(
        self, work: Callable[[AsyncConnection], Awaitable[_T]], write: bool | str
    ) -> _T:
        async with self.engine.connect() as conn:
            if write == "autocommit":  # one statement, its own transaction
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                return await work(conn)
            if write:
                await conn.execution_options(mnemoscope_write=True)
            result = await work(conn)
            if write:
                try:
                    await conn.commit()
                except (sa.exc.DBAPIError, OSError) as exc:
                    raise _CommitFailedError(exc) from exc
            return result

    async def _existing(
        self, conn: AsyncConnection, ids: Sequence[str], *, lock: bool = False
    ) -> dict[str, int]:
        """msg_id -> seq of the stored ones among ``ids`` (unique-index lookups); ``lock``
        takes their row locks until commit (``FOR UPDATE``; SQLite's writes are serial)."""
        t = self.messages
        found: dict[str, int] = {}
        for chunk in chunks(ids):
            stmt = sa.select(t.c.msg_id, t.c.seq).where(self._where(t), t.c.msg_id.in_(chunk))
            rows = await conn.execute(stmt.with_for_update() if lock else stmt)
            found.update((r[0], r[1]) for r in rows)
        return found

    async def _allocate(self, conn: AsyncConnection, count: int) -> int:
        """Reserve ``count`` positions; returns the first. Locks the session's counter row."""
        c = self.sessions
        bump = sa.update(c).where(self._where(c))
        if self._dialect in ("postgresql", "sqlite"):
            bump = bump.values(last_seq=c.c.last_seq + count).returning(c.c.last_seq)
            last = (await conn.execute(bump)).scalar_one_or_none()
        else:  # MySQL/MariaDB: the new value comes back in the OK packet as the insert id
            bumped = await conn.execute(
                bump.values(last_seq=sa.func.last_insert_id(c.c.last_seq + count))
            )
            last = bumped.lastrowid if bumped.rowcount else None
        if last is None:  # first write of the session; a racing creator -> IntegrityError, retry
            await conn.execute(
                sa.insert(c).values(
                    user_id=self.user_id, session_id=self.session_id, last_seq=count
                )
            )
            last = count
        return int(last) - count + 1

    async def _insert(self, conn: AsyncConnection, new: dict[str, str]) -> dict[str, int]:
        """Insert messages at the next positions, in order; msg_id -> seq."""
        u, s = self.user_id, self.session_id
        first = await self._allocate(conn, len(new))
        seqs = {i: first + n for n, i in enumerate(new)}
        rows = [
            {"user_id": u, "session_id": s, "seq": seqs[i], "msg_id": i, "msg_json": d}
            for i, d in new.items()
        ]
        await conn.execute(sa.insert(self.messages), rows)
        return seqs

    def _mark_rows(self, seqs: dict[str, int], marks: MarkPlan) -> list[dict[str, Any]]:
        u, s = self.user_id, self.session_id
        return [
            {"user_id": u, "session_id": s, "msg_id": i, "mark": m, "seq": seqs[i]}
            for i, m in mark_pairs(marks, seqs)
        ]

    async def _run_driver(
        self, fn: Callable[[Any], Awaitable[_T]], *, what: str, read: bool = False
    ) -> _T:
        """``fn(driver_connection)`` (one self-committing, idempotent statement), retried
        on a lost connection, deadlock or lock timeout (see ``_sqlalchemy_raw``)."""
        clean = self._clean_after_read if read else self._clean
        return await run_retrying(
            self.engine, fn, clean, attempts=_ATTEMPTS, what=f"AsyncSQLAlchemyMemory.{what}"
        )

    # ------------------------------------------------------------------- writing
    async def add(
        self,
        msgs: Msg | Sequence[Msg] | None,
        marks: AddMarks = None,
        *,
        on_duplicate: OnDuplicate = "ignore",
    ) -> int:
        items, plan = prepare_add(msgs, marks, on_duplicate)
        if not items:
            return 0
        for m in plan if isinstance(plan, list) else {m for v in plan.values() for m in v}:
            check_key("a mark", m)
        for msg in items:
            check_key("a message id", msg.id)
        payload = dump_msgs(items)  # every message validated before anything is written

        if self._sqlite is not None:  # the whole add in one call of the worker thread
            return await self._run_sqlite(
                add_sync,
                *self._key,
                payload,
                plan,
                on_duplicate,
                what="add",
            )
        if on_duplicate == "ignore" and self._driver_fast:
            await self._ensure_tables()  # connects: the dialect knows the server after that
            if self._dialect == "postgresql":
                sql, args = pg_add_statement(
                    self._pg_sql, self.user_id, self.session_id, payload, plan
                )
                return await self._run_driver(fetch_value(sql, args), what="add")
            if mariadb.supports_block(self.engine.dialect):
                first = first_occurrences(payload)
                sql, args = mariadb.add_ignore_statement(
                    self.table_prefix,
                    self.user_id,
                    self.session_id,
                    first,
                    plan,
                    mariadb.key_collation(self.engine.dialect),
                )
                return await self._run_driver(fetch_one(sql, args), what="add")

        async def work(conn: AsyncConnection) -> int:
            existing = await self._existing(conn, [i for i, _ in payload])
            new, replace = plan_add(payload, existing, on_duplicate)
            u, s = self.user_id, self.session_id
            seqs: dict[str, int] = {}
            if new:
                seqs = await self._insert(conn, new)
            if replace:
                t = self.messages
                stmt = (
                    sa.update(t)
                    .where(
                        t.c.user_id == sa.bindparam("u"),
                        t.c.session_id == sa.bindparam("s"),
                        t.c.msg_id == sa.bindparam("i"),
                    )
                    .values(msg_json=sa.bindparam("d"))
                )
                await conn.execute(
                    stmt, [{"u": u, "s": s, "i": i, "d": d} for i, d in replace.items()]
                )
                k = self.marks
                for chunk in chunks(list(replace)):
                    await conn.execute(sa.delete(k).where(self._where(k), k.c.msg_id.in_(chunk)))
            seqs.update((i, existing[i]) for i in replace)
            rows = self._mark_rows(seqs, plan)
            if rows:
                await conn.execute(sa.insert(self.marks), rows)
            return len(new)

        return await self._run(work, write=True, idempotent=on_duplicate != "error", what="add")

    async def _delete_ids(self, conn: AsyncConnection, ids: Sequence[str]) -> int:
        """Messages first, then marks: a concurrent ``update_marks`` holding a message's row
        lock commits its marks before they are deleted (marks first would miss them)."""
        t, k = self.messages, self.marks
        deleted = 0
        if self._dialect == "postgresql":  # one array parameter: one statement per table
            from sqlalchemy.dialects.postgresql import ARRAY

            arr = sa.bindparam("ids", list(ids), type_=ARRAY(sa.Text()))
            res = await conn.execute(sa.delete(t).where(self._where(t), t.c.msg_id == sa.any_(arr)))
            await conn.execute(sa.delete(k).where(self._where(k), k.c.msg_id == sa.any_(arr)))
            return int(res.rowcount)
        if self._dialect in ("mysql", "mariadb"):
            for chunk in chunks(ids, mariadb.DELETE_CHUNK):
                msgs_sql, marks_sql = mariadb.delete_ids_sql(self.table_prefix, len(chunk))
                args = (self.user_id, self.session_id, *chunk)
                deleted += (await conn.exec_driver_sql(msgs_sql, args)).rowcount
                await conn.exec_driver_sql(marks_sql, args)
            return deleted
        for chunk in chunks(ids):
            res = await conn.execute(sa.delete(t).where(self._where(t), t.c.msg_id.in_(chunk)))
            await conn.execute(sa.delete(k).where(self._where(k), k.c.msg_id.in_(chunk)))
            deleted += res.rowcount
        return deleted

    async def delete(self, ids: str | Iterable[str]) -> int:
        id_list = list(dict.fromkeys(normalize_ids(ids)))
        if not id_list:
            return 0
        if self._sqlite is not None:
            return await self._run_sqlite(delete_sync, *self._key, id_list, what="delete")

        async def work(conn: AsyncConnection) -> int:
            return await self._delete_ids(conn, id_list)

        return await self._run(work, write=True, what="delete")

    async def delete_by_mark(self, marks: Marks) -> int:
        mark_list = normalize_marks(marks)
        if not mark_list:
            return 0
        if self._sqlite is not None:
            return await self._run_sqlite(
                delete_by_mark_sync, *self._key, mark_list, what="delete_by_mark"
            )
        k = self.marks

        async def work(conn: AsyncConnection) -> int:
            rows = await conn.execute(
                sa.select(k.c.msg_id).distinct().where(self._where(k), k.c.mark.in_(mark_list))
            )
            return await self._delete_ids(conn, [r[0] for r in rows])

        return await self._run(work, write=True, what="delete_by_mark")

    async def update_marks(
        self,
        ids: str | Iterable[str] | None = None,
        *,
        add: Marks = None,
        remove: Marks = None,
    ) -> int:
        to_add, to_remove = normalize_marks(add), normalize_marks(remove)
        for m in to_add:
            check_key("a mark", m)
        id_list = None if ids is None else list(dict.fromkeys(normalize_ids(ids)))
        t, k = self.messages, self.marks

        async def work(conn: AsyncConnection) -> int:
            # the rows stay locked until commit: a racing clear() or delete() waits, then
            # deletes the marks written here (otherwise they would outlive their message)
            if id_list is None:
                rows = await conn.execute(
                    sa.select(t.c.msg_id, t.c.seq).where(self._where(t)).with_for_update()
                )
                found = {r[0]: r[1] for r in rows}
            else:
                found = await self._existing(conn, id_list, lock=True)
            targets = list(found)
            if not targets:
                return 0
            remove_only = [m for m in to_remove if m not in to_add]
            if remove_only:
                cond = [self._where(k), k.c.mark.in_(remove_only)]
                if id_list is None:
                    await conn.execute(sa.delete(k).where(*cond))
                else:
                    for chunk in chunks(targets):
                        await conn.execute(sa.delete(k).where(*cond, k.c.msg_id.in_(chunk)))
            if to_add:
                have: set[tuple[str, str]] = set()
                for chunk in chunks(targets):
                    rows = await conn.execute(
                        sa.select(k.c.msg_id, k.c.mark).where(
                            self._where(k), k.c.mark.in_(to_add), k.c.msg_id.in_(chunk)
                        )
                    )
                    have.update((r[0], r[1]) for r in rows)
                missing = [
                    row
                    for row in self._mark_rows(found, to_add)
                    if (row["msg_id"], row["mark"]) not in have
                ]
                if missing:
                    await conn.execute(sa.insert(k), missing)
            return len(targets)

        return await self._run(work, write=True, what="update_marks")

    async def clear(self) -> None:
        if self._sqlite is not None:
            await self._run_sqlite(clear_sync, *self._key, what="clear")
            return
        t, k, c = self.messages, self.marks, self.sessions

        async def work(conn: AsyncConnection) -> None:
            # lock the counter row first: waits for in-flight adds of the session to commit.
            # It stays: positions are never reused, so no leftover mark can match a later
            # message. Messages before marks (see _delete_ids).
            await conn.execute(sa.select(c.c.last_seq).where(self._where(c)).with_for_update())
            await conn.execute(sa.delete(t).where(self._where(t)))
            await conn.execute(sa.delete(k).where(self._where(k)))

        await self._run(work, write=True, what="clear")

    # ------------------------------------------------------------------- reading
    def _select(self, marks: Marks, exclude_marks: Marks) -> sa.Select[Any]:
        t, k = self.messages, self.marks
        want, skip = normalize_marks(marks), normalize_marks(exclude_marks)
        stmt = sa.select(t.c.seq, t.c.msg_id, t.c.msg_json).where(self._where(t))
        if want:
            # driven from the (user, session, mark, seq) index, then primary-key lookups
            wanted = sa.select(k.c.seq).where(self._where(k), k.c.mark.in_(want))
            if len(want) > 1:
                wanted = wanted.distinct()
            sub = wanted.subquery("wanted")
            stmt = sa.select(t.c.seq, t.c.msg_id, t.c.msg_json).join_from(
                sub,
                t,
                sa.and_(
                    t.c.user_id == self.user_id,
                    t.c.session_id == self.session_id,
                    t.c.seq == sub.c.seq,
                ),
            )
        if skip:
            unwanted = sa.select(k.c.seq).where(self._where(k), k.c.mark.in_(skip))
            stmt = stmt.where(t.c.seq.not_in(unwanted))
        return stmt

    def _decode(self, msg_id: str, data: Any, on_corrupt: OnCorrupt) -> Msg | None:
        try:
            return Msg.model_validate_json(data)
        except ValueError as exc:  # pydantic.ValidationError
            lines = str(exc).strip().splitlines()
            self._report_corrupt(msg_id, lines[0][:200] if lines else repr(exc), on_corrupt)
            return None

    async def get(
        self,
        *,
        last_n: int | None = None,
        marks: Marks = None,
        exclude_marks: Marks = None,
        on_corrupt: OnCorrupt = "skip",
    ) -> list[Msg]:
        if last_n is not None and last_n <= 0:
            return []
        if self._sqlite is not None or self._driver_fast:
            rows = await self._read(normalize_marks(marks), normalize_marks(exclude_marks), last_n)
        else:
            stmt = self._select(marks, exclude_marks)
            seq = self.messages.c.seq
            stmt = stmt.order_by(seq) if last_n is None else stmt.order_by(seq.desc()).limit(last_n)

            async def work(conn: AsyncConnection) -> list[Any]:
                return [(r[1], r[2]) for r in await conn.execute(stmt)]

            rows = await self._run(work, write=False, what="get")
        if last_n is not None:
            rows.reverse()
        return decode_rows(self, [r[0] for r in rows], [r[1] for r in rows], on_corrupt)

    async def _read(self, want: list[str], skip: list[str], last_n: int | None) -> list[Any]:
        """``(msg_id, msg_json)`` rows of ``get`` in one driver call (SQLite: one call of
        the worker thread; PostgreSQL and MariaDB: one statement on the pooled driver
        connection, no SQLAlchemy result objects for thousands of rows)."""
        style = "qmark" if self._sqlite else "format"
        if self._dialect == "postgresql":
            style = "numeric"
        sql, params = read_sql(self.table_prefix, style, len(want), len(skip), last_n is not None)
        args = params(self.user_id, self.session_id, want, skip, last_n or 0)
        if self._sqlite is not None:
            return await self._run_sqlite(read_sync, sql, args, what="get")
        await self._ensure_tables()
        fetch = fetch_all(sql, args, numeric=style == "numeric")
        return await self._run_driver(fetch, what="get", read=True)

    async def get_marks(self, msg_id: str) -> list[str] | None:
        t, k = self.messages, self.marks
        stmt = (
            sa.select(t.c.msg_id, k.c.mark)
            .select_from(
                t.outerjoin(
                    k,
                    sa.and_(
                        k.c.user_id == t.c.user_id,
                        k.c.session_id == t.c.session_id,
                        k.c.msg_id == t.c.msg_id,
                    ),
                )
            )
            .where(self._where(t), t.c.msg_id == msg_id)
        )

        async def work(conn: AsyncConnection) -> list[Any]:
            return list(await conn.execute(stmt))

        rows = await self._run(work, write=False, what="get_marks")
        if not rows:
            return None
        return sorted(r[1] for r in rows if r[1] is not None)

    async def size(self) -> int:
        t = self.messages
        stmt = sa.select(sa.func.count()).select_from(t).where(self._where(t))

        async def work(conn: AsyncConnection) -> int:
            return int((await conn.execute(stmt)).scalar_one())

        return await self._run(work, write=False, what="size")

    async def export_state(self) -> MemoryState:
        """The whole session with marks in two queries of one transaction."""
        t, k = self.messages, self.marks

        async def work(conn: AsyncConnection) -> tuple[list[Any], list[Any]]:
            msgs = list(
                await conn.execute(
                    sa.select(t.c.msg_id, t.c.msg_json).where(self._where(t)).order_by(t.c.seq)
                )
            )
            marks = list(await conn.execute(sa.select(k.c.msg_id, k.c.mark).where(self._where(k))))
            return msgs, marks

        rows, mark_rows = await self._run(work, write=False, what="export_state")
        by_id: dict[str, list[str]] = {}
        for msg_id, mark in mark_rows:
            by_id.setdefault(msg_id, []).append(mark)
        entries = []
        for msg_id, data in rows:
            msg = self._decode(msg_id, data, "raise")
            assert msg is not None
            entries.append(StoredMsg(msg=msg, marks=sorted(by_id.get(msg_id, []))))
        return MemoryState(user_id=self.user_id, session_id=self.session_id, messages=entries)

    # ----------------------------------------------------------------- lifecycle
    async def aclose(self) -> None:
        """Dispose of the engine if this object created it."""
        if self._owns_engine:
            close_worker(self.engine.sync_engine)
            await self.engine.dispose()
