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

What differs between databases is a strategy object chosen once, when the memory is
built (``_sqlalchemy_dialect.SqlDialect``, the portable path, and one subclass per
database and driver); the memory validates its arguments and calls it. Every retried
operation goes through one retry helper (``_sqlalchemy_common.retrying``).

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
import weakref
from typing import Any

from mnemoscope._optional import require
from mnemoscope.errors import MissingExtraError, UserError
from mnemoscope.memory._base import AddRequest, GetQuery, MarkUpdate, MemoryBase
from mnemoscope.memory._msg_json import decode_counted
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

from mnemoscope.memory._sqlalchemy_common import (  # noqa: E402 (needs sqlalchemy)
    check_key,
    chunks,
    retrying,
    shared_tables,
)
from mnemoscope.memory._sqlalchemy_dialect import SessionRows, SqlDialect  # noqa: E402
from mnemoscope.memory._sqlalchemy_mysql import AiomysqlDialect, MySQLDialect  # noqa: E402
from mnemoscope.memory._sqlalchemy_pg import AsyncpgDialect, PostgresDialect  # noqa: E402
from mnemoscope.memory._sqlalchemy_sqlite import (  # noqa: E402
    CONFIGURED,
    SQLITE_BUSY_TIMEOUT_MS,
    SQLiteDialect,
    close_worker,
    configure_sqlite,
    sqlite_worker_for,
)

DEFAULT_URL = "sqlite+aiosqlite:///mnemoscope_memory.db"
"""Used when no engine or URL is given: a file in the current directory."""


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


# (dialect name, driver) -> the strategy; a name alone stands for any other driver
_DIALECTS: dict[tuple[str, str | None], type[SqlDialect]] = {
    ("postgresql", "asyncpg"): AsyncpgDialect,
    ("postgresql", None): PostgresDialect,
    ("mysql", "aiomysql"): AiomysqlDialect,
    ("mariadb", "aiomysql"): AiomysqlDialect,
    ("mysql", None): MySQLDialect,
    ("mariadb", None): MySQLDialect,
}


def _dialect_for(engine: AsyncEngine, rows: SessionRows) -> SqlDialect:
    """The strategy for ``engine``'s database, chosen once per memory."""
    name, driver = engine.dialect.name, engine.dialect.driver
    if name == "sqlite":
        sync = engine.sync_engine
        # a plain file gets the worker thread; an in-memory database keeps the engine
        worker = sqlite_worker_for(
            sync, configured=sync in CONFIGURED, busy_timeout_ms=SQLITE_BUSY_TIMEOUT_MS
        )
        return SqlDialect(engine, rows) if worker is None else SQLiteDialect(engine, rows, worker)
    strategy = _DIALECTS.get((name, driver)) or _DIALECTS.get((name, None), SqlDialect)
    return strategy(engine, rows)


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
        self.sessions, self.messages, self.marks = shared_tables(table_prefix)
        rows = SessionRows(
            table_prefix, user_id, session_id, self.sessions, self.messages, self.marks
        )
        self._dialect = _dialect_for(self.engine, rows)
        self._init_lock = asyncio.Lock()

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

    # ------------------------------------------------------------------ tables
    def _where(self, table: sa.Table) -> sa.ColumnElement[bool]:
        return self._dialect.rows.where(table)

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

        async def prepare() -> list[str]:
            async with self.engine.begin() as conn:
                return await self._dialect.prepare_tables(conn, upgrade=upgrade)

        # any database error is retried: another process may have created the tables
        # between our check and CREATE
        return await retrying(
            prepare,
            catch=sa.exc.DBAPIError,
            transient=lambda exc: True,
            what="AsyncSQLAlchemyMemory: creating the tables",
        )

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

    # ------------------------------------------------------------------- writing
    async def _add(self, request: AddRequest) -> int:
        plan = request.marks
        for m in plan if isinstance(plan, list) else {m for v in plan.values() for m in v}:
            check_key("a mark", m)
        for msg in request.msgs:
            check_key("a message id", msg.id)
        await self._ensure_tables()  # connects: the dialect knows the server after that
        return await self._dialect.add(request.payload, plan, request.on_duplicate)

    async def _delete(self, ids: list[str]) -> int:
        await self._ensure_tables()
        return await self._dialect.delete(ids)

    async def _delete_by_mark(self, marks: list[str]) -> int:
        await self._ensure_tables()
        return await self._dialect.delete_by_mark(marks)

    async def _update_marks(self, update: MarkUpdate) -> int:
        to_add, to_remove, id_list = update.add, update.remove, update.ids
        for m in to_add:
            check_key("a mark", m)
        t, k = self.messages, self.marks
        dialect = self._dialect

        async def work(conn: AsyncConnection) -> int:
            # the rows stay locked until commit: a racing clear() or delete() waits, then
            # deletes the marks written here (otherwise they would outlive their message)
            if id_list is None:
                rows = await conn.execute(
                    sa.select(t.c.msg_id, t.c.seq).where(self._where(t)).with_for_update()
                )
                found = {r[0]: r[1] for r in rows}
            else:
                found = await dialect.existing(conn, id_list, lock=True)
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
                    for row in dialect.rows.mark_rows(found, to_add)
                    if (row["msg_id"], row["mark"]) not in have
                ]
                if missing:
                    await conn.execute(sa.insert(k), missing)
            return len(targets)

        await self._ensure_tables()
        return await dialect.transaction(work, write=True, what="update_marks")

    async def _clear(self) -> None:
        await self._ensure_tables()
        await self._dialect.clear()

    # ------------------------------------------------------------------- reading
    async def _get(self, query: GetQuery) -> list[Msg]:
        await self._ensure_tables()
        want, skip, last_n = query.marks, query.exclude_marks, query.last_n
        # MariaDB: one row holding every document, validated as one JSON array in one
        # call; anything else (a corrupt row, a session too large for the server to join)
        # is read again row by row, where corrupt rows are reported. Elsewhere rows.
        joined = await self._dialect.read_joined(want, skip, last_n)
        if joined is not None:
            count, id_crc_sum, docs = joined
            if not count:
                return []
            msgs = decode_counted(count, id_crc_sum, "[" + docs + "]")
            if msgs is not None:
                return msgs
        rows = await self._dialect.read(want, skip, last_n)
        if last_n is not None:
            rows.reverse()
        return self._decode([r[0] for r in rows], [r[1] for r in rows], query.on_corrupt)

    async def _query(self, stmt: sa.Select[Any], what: str) -> list[Any]:
        """The rows of one ``SELECT`` (retried like every operation)."""

        async def work(conn: AsyncConnection) -> list[Any]:
            return list(await conn.execute(stmt))

        await self._ensure_tables()
        return await self._dialect.transaction(work, write=False, what=what)

    async def _get_marks(self, msg_id: str) -> list[str] | None:
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
        rows = await self._query(stmt, "get_marks")
        if not rows:
            return None
        return sorted(r[1] for r in rows if r[1] is not None)

    async def _size(self) -> int:
        t = self.messages
        rows = await self._query(
            sa.select(sa.func.count()).select_from(t).where(self._where(t)), "size"
        )
        return int(rows[0][0])

    async def _export_rows(self) -> list[tuple[Any, Any, list[str]]]:
        # two queries of one transaction
        t, k = self.messages, self.marks

        async def work(conn: AsyncConnection) -> tuple[list[Any], list[Any]]:
            msgs = list(
                await conn.execute(
                    sa.select(t.c.msg_id, t.c.msg_json).where(self._where(t)).order_by(t.c.seq)
                )
            )
            marks = list(await conn.execute(sa.select(k.c.msg_id, k.c.mark).where(self._where(k))))
            return msgs, marks

        await self._ensure_tables()
        rows, mark_rows = await self._dialect.transaction(work, write=False, what="export_state")
        by_id: dict[str, list[str]] = {}
        for msg_id, mark in mark_rows:
            by_id.setdefault(msg_id, []).append(mark)
        return [(msg_id, data, sorted(by_id.get(msg_id, []))) for msg_id, data in rows]

    # ----------------------------------------------------------------- lifecycle
    async def aclose(self) -> None:
        """Dispose of the engine if this object created it."""
        if self._owns_engine:
            await close_worker(self.engine.sync_engine)
            await self.engine.dispose()
