"""What differs between the databases of :class:`~mnemoscope.memory.AsyncSQLAlchemyMemory`,
as one strategy object per database, chosen once when the memory is built.

:class:`SqlDialect` is the portable path: every write is one SQLAlchemy transaction on the
engine (``_once``), retried through the store's one retry loop
(:func:`~mnemoscope.memory._sqlalchemy_common.retrying`), and reads are SQLAlchemy
``SELECT`` statements. It runs any database SQLAlchemy supports with ``RETURNING`` (and
SQLite databases that are not a plain file). Each database module subclasses it and
replaces only the steps its database does faster or differently:

==========================  ===========================================================
``SQLiteDialect``           every write and read as one call of a worker thread on a
                            plain ``sqlite3`` connection (``_sqlalchemy_sqlite``)
``PostgresDialect``         deletes with one array parameter (any driver)
``AsyncpgDialect``          ignore-adds as one statement in autocommit, reads on the
                            pooled ``asyncpg`` connection (``_sqlalchemy_pg``)
``MySQLDialect``            key collations, positions through ``LAST_INSERT_ID``,
                            deletes as driver SQL (``_sqlalchemy_mysql``)
``AiomysqlDialect``         ignore-adds as one MariaDB block, reads on the pooled
                            ``aiomysql`` connection
==========================  ===========================================================
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from mnemoscope.errors import MemoryStoreError
from mnemoscope.memory._base import MarkPlan, mark_pairs
from mnemoscope.memory._sqlalchemy_common import (
    MYSQL_KEY_COLLATION,
    chunks,
    plan_add,
    read_sql,
    retrying,
    shared_tables,
    transient,
)
from mnemoscope.memory._sqlalchemy_raw import fetch_all, run_retrying

_T = TypeVar("_T")
Work = Callable[[AsyncConnection], Awaitable[_T]]


@dataclass(frozen=True)
class SessionRows:
    """Where one session's rows live: the tables of a prefix, scoped by user and session."""

    prefix: str
    user_id: str
    session_id: str
    sessions: sa.Table
    messages: sa.Table
    marks: sa.Table

    def where(self, table: sa.Table) -> sa.ColumnElement[bool]:
        return sa.and_(table.c.user_id == self.user_id, table.c.session_id == self.session_id)

    def mark_rows(self, seqs: dict[str, int], marks: MarkPlan) -> list[dict[str, Any]]:
        """Rows of the marks table for the messages ``seqs`` (id -> position)."""
        u, s = self.user_id, self.session_id
        return [
            {"user_id": u, "session_id": s, "msg_id": i, "mark": m, "seq": seqs[i]}
            for i, m in mark_pairs(marks, seqs)
        ]


class _CommitFailedError(Exception):
    """The connection failed during ``COMMIT`` of a write that must not be repeated."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class SqlDialect:
    """The portable path of one session's store on ``engine``; the base of every dialect.

    Args:
        engine: the memory's engine.
        rows: the tables and the session they are scoped to.
    """

    def __init__(self, engine: AsyncEngine, rows: SessionRows) -> None:
        self.engine = engine
        self.rows = rows

    # ------------------------------------------------------------------ tables
    async def prepare_tables(self, conn: AsyncConnection, *, upgrade: bool) -> list[str]:
        """Create missing tables in ``conn``'s transaction; return the statements an older
        schema of the tables needs (after running them when ``upgrade`` is true)."""
        _, messages, _ = shared_tables(self.rows.prefix, MYSQL_KEY_COLLATION)
        await conn.run_sync(messages.metadata.create_all, checkfirst=True)
        return []

    # ---------------------------------------------------------- transactions
    async def transaction(
        self, work: Work[_T], *, write: bool, idempotent: bool = True, what: str
    ) -> _T:
        """``work(conn)`` in one transaction (a write one when ``write``), retried while
        the failure is transient. Only a connection lost during ``COMMIT`` of a write that
        is not ``idempotent`` is not retried: its outcome is unknown."""

        def worth_retrying(exc: BaseException) -> bool:
            return not isinstance(exc, sa.exc.DBAPIError) or transient(exc)

        return await retrying(
            lambda: self._once(work, write, idempotent, what),
            catch=(sa.exc.DBAPIError, OSError, ConnectionError),
            transient=worth_retrying,
            what=f"AsyncSQLAlchemyMemory.{what}",
        )

    async def _once(self, work: Work[_T], write: bool, idempotent: bool, what: str) -> _T:
        async with self.engine.connect() as conn:
            if write:
                await conn.execution_options(mnemoscope_write=True)
            result = await work(conn)
            if write:
                try:
                    await conn.commit()
                except (sa.exc.DBAPIError, OSError) as exc:
                    if idempotent:
                        raise
                    raise MemoryStoreError(
                        f"AsyncSQLAlchemyMemory.{what}: the connection failed during COMMIT "
                        f"({exc}); the batch was stored entirely or not at all, check with "
                        "get_marks()"
                    ) from exc
            return result

    # ---------------------------------------------------------------- steps
    async def existing(
        self, conn: AsyncConnection, ids: Sequence[str], *, lock: bool = False
    ) -> dict[str, int]:
        """msg_id -> seq of the stored ones among ``ids`` (unique-index lookups); ``lock``
        takes their row locks until commit (``FOR UPDATE``; SQLite's writes are serial)."""
        t = self.rows.messages
        found: dict[str, int] = {}
        for chunk in chunks(ids):
            stmt = sa.select(t.c.msg_id, t.c.seq).where(self.rows.where(t), t.c.msg_id.in_(chunk))
            rows = await conn.execute(stmt.with_for_update() if lock else stmt)
            found.update((r[0], r[1]) for r in rows)
        return found

    async def bump_counter(self, conn: AsyncConnection, count: int) -> int | None:
        """Add ``count`` to the session's ``last_seq`` (locking its row); the new value, or
        ``None`` when the session has no counter row yet."""
        c = self.rows.sessions
        bump = sa.update(c).where(self.rows.where(c))
        bump = bump.values(last_seq=c.c.last_seq + count).returning(c.c.last_seq)
        return (await conn.execute(bump)).scalar_one_or_none()

    async def allocate(self, conn: AsyncConnection, count: int) -> int:
        """Reserve ``count`` positions; returns the first. Locks the session's counter row."""
        last = await self.bump_counter(conn, count)
        if last is None:  # first write of the session; a racing creator -> IntegrityError, retry
            r = self.rows
            await conn.execute(
                sa.insert(r.sessions).values(
                    user_id=r.user_id, session_id=r.session_id, last_seq=count
                )
            )
            last = count
        return int(last) - count + 1

    async def insert(self, conn: AsyncConnection, new: dict[str, str]) -> dict[str, int]:
        """Insert messages at the next positions, in order; msg_id -> seq."""
        u, s = self.rows.user_id, self.rows.session_id
        first = await self.allocate(conn, len(new))
        seqs = {i: first + n for n, i in enumerate(new)}
        rows = [
            {"user_id": u, "session_id": s, "seq": seqs[i], "msg_id": i, "msg_json": d}
            for i, d in new.items()
        ]
        await conn.execute(sa.insert(self.rows.messages), rows)
        return seqs

    async def delete_ids(self, conn: AsyncConnection, ids: Sequence[str]) -> int:
        """Messages first, then marks: a concurrent ``update_marks`` holding a message's row
        lock commits its marks before they are deleted (marks first would miss them)."""
        t, k, where = self.rows.messages, self.rows.marks, self.rows.where
        deleted = 0
        for chunk in chunks(ids):
            res = await conn.execute(sa.delete(t).where(where(t), t.c.msg_id.in_(chunk)))
            await conn.execute(sa.delete(k).where(where(k), k.c.msg_id.in_(chunk)))
            deleted += res.rowcount
        return deleted

    # ------------------------------------------------------------ operations
    async def add(self, payload: list[tuple[str, str]], plan: MarkPlan, on_duplicate: str) -> int:
        """Store ``payload`` (``(id, JSON)`` in batch order) with the marks of ``plan``; how
        many messages were new."""
        r = self.rows

        async def work(conn: AsyncConnection) -> int:
            existing = await self.existing(conn, [i for i, _ in payload])
            new, replace = plan_add(payload, existing, on_duplicate)
            seqs: dict[str, int] = {}
            if new:
                seqs = await self.insert(conn, new)
            if replace:
                t, k = r.messages, r.marks
                stmt = (
                    sa.update(t)
                    .where(
                        t.c.user_id == sa.bindparam("u"),
                        t.c.session_id == sa.bindparam("s"),
                        t.c.msg_id == sa.bindparam("i"),
                    )
                    .values(msg_json=sa.bindparam("d"))
                )
                u, s = r.user_id, r.session_id
                await conn.execute(
                    stmt, [{"u": u, "s": s, "i": i, "d": d} for i, d in replace.items()]
                )
                for chunk in chunks(list(replace)):
                    await conn.execute(sa.delete(k).where(r.where(k), k.c.msg_id.in_(chunk)))
            seqs.update((i, existing[i]) for i in replace)
            mark_rows = r.mark_rows(seqs, plan)
            if mark_rows:
                await conn.execute(sa.insert(r.marks), mark_rows)
            return len(new)

        return await self.transaction(
            work, write=True, idempotent=on_duplicate != "error", what="add"
        )

    async def delete(self, ids: list[str]) -> int:
        """Delete the messages ``ids`` (distinct) and their marks; how many were stored."""

        async def work(conn: AsyncConnection) -> int:
            return await self.delete_ids(conn, ids)

        return await self.transaction(work, write=True, what="delete")

    async def delete_by_mark(self, marks: list[str]) -> int:
        """Delete every message with one of ``marks``; how many there were."""
        k = self.rows.marks

        async def work(conn: AsyncConnection) -> int:
            found = await conn.execute(
                sa.select(k.c.msg_id).distinct().where(self.rows.where(k), k.c.mark.in_(marks))
            )
            return await self.delete_ids(conn, [r[0] for r in found])

        return await self.transaction(work, write=True, what="delete_by_mark")

    async def clear(self) -> None:
        """Delete the session's messages and marks; its counter row stays."""
        t, k, c, where = self.rows.messages, self.rows.marks, self.rows.sessions, self.rows.where

        async def work(conn: AsyncConnection) -> None:
            # lock the counter row first: waits for in-flight adds of the session to commit.
            # It stays: positions are never reused, so no leftover mark can match a later
            # message. Messages before marks (see delete_ids).
            await conn.execute(sa.select(c.c.last_seq).where(where(c)).with_for_update())
            await conn.execute(sa.delete(t).where(where(t)))
            await conn.execute(sa.delete(k).where(where(k)))

        await self.transaction(work, write=True, what="clear")

    async def read(self, want: list[str], skip: list[str], last_n: int | None) -> list[Any]:
        """``(msg_id, msg_json)`` rows of ``get``: in position order, or the ``last_n``
        newest first."""
        stmt = self._select(want, skip)
        seq = self.rows.messages.c.seq
        stmt = stmt.order_by(seq) if last_n is None else stmt.order_by(seq.desc()).limit(last_n)

        async def work(conn: AsyncConnection) -> list[Any]:
            return [(r[1], r[2]) for r in await conn.execute(stmt)]

        return await self.transaction(work, write=False, what="get")

    async def read_joined(
        self, want: list[str], skip: list[str], last_n: int | None
    ) -> tuple[int, int, str] | None:
        """What :meth:`read` selects, read as one row: ``(count, sum of the ids' CRC-32,
        the documents joined by commas)``, in position order (a JSON array without its
        brackets); ``None`` when the rows must be read one by one (this portable path;
        MariaDB joins them, :func:`~mnemoscope.memory._sqlalchemy_common.joined_sql`)."""
        return None

    async def read_on_driver(
        self,
        style: str,
        clean: Callable[[Any], bool],
        want: list[str],
        skip: list[str],
        last_n: int | None,
        *,
        joined: bool = False,
    ) -> list[Any]:
        """:meth:`read` (or with ``joined`` :meth:`read_joined`'s one row) as one
        statement on the pooled driver connection (asyncpg: ``style="numeric"``, aiomysql:
        ``"format"``), no SQLAlchemy result objects for thousands of rows; ``clean`` is the
        driver's :func:`transaction_probe`."""
        r = self.rows
        limit = last_n is not None
        sql, params = read_sql(r.prefix, style, len(want), len(skip), limit, joined)
        args = params(r.user_id, r.session_id, want, skip, last_n or 0)
        fetch = fetch_all(sql, args, numeric=style == "numeric")
        return await run_retrying(self.engine, fetch, clean, what="AsyncSQLAlchemyMemory.get")

    def _select(self, want: list[str], skip: list[str]) -> sa.Select[Any]:
        r = self.rows
        t, k = r.messages, r.marks
        stmt = sa.select(t.c.seq, t.c.msg_id, t.c.msg_json).where(r.where(t))
        if want:
            # driven from the (user, session, mark, seq) index, then primary-key lookups
            wanted = sa.select(k.c.seq).where(r.where(k), k.c.mark.in_(want))
            if len(want) > 1:
                wanted = wanted.distinct()
            sub = wanted.subquery("wanted")
            stmt = sa.select(t.c.seq, t.c.msg_id, t.c.msg_json).join_from(
                sub,
                t,
                sa.and_(
                    t.c.user_id == r.user_id,
                    t.c.session_id == r.session_id,
                    t.c.seq == sub.c.seq,
                ),
            )
        if skip:
            unwanted = sa.select(k.c.seq).where(r.where(k), k.c.mark.in_(skip))
            stmt = stmt.where(t.c.seq.not_in(unwanted))
        return stmt
