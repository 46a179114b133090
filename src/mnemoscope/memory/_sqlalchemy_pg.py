"""PostgreSQL fast path of :class:`~mnemoscope.memory.AsyncSQLAlchemyMemory`.

``add(..., on_duplicate="ignore")`` is one data-modifying statement run in autocommit:
one round trip, one commit. Its parts:

``probe``, ``fresh``
    the batch's ids not yet stored: one unique-index probe each, written as a correlated
    scalar subquery so that the planner cannot turn it into a join that scans the
    session (which it does on tables autovacuum has not analysed yet);
``bump``
    reserves ``count(fresh)`` positions on the session's counter row
    (``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``). The row lock it takes is held
    until commit, so writers of one session are serialised exactly as on the
    transactional path: a batch's positions are contiguous and commit order is position
    order;
``ins``
    inserts the messages at those positions, ``ON CONFLICT DO NOTHING`` on the
    ``(user_id, session_id, msg_id)`` key: an id that a concurrent writer committed while
    this statement waited for the counter row is skipped (its reserved position stays
    unused: positions may have gaps, never duplicates);
``mk``
    the marks of the inserted messages (the same for all, or per message:
    ``add_ignore_sql(prefix, per_message=True)`` takes ``(msg_id, mark)`` pairs).

Every probe is an equality on a full unique or primary key, so the cost of an ``add`` does
not grow with the session nor depend on table statistics.

One message (:func:`add_one_sql`, the agent's common write) needs no probe: the counter is
bumped and the row inserted ``ON CONFLICT DO NOTHING``; an id already stored leaves an
unused position (a gap, never a duplicate). Both statements run through the driver's
prepared-statement cache, so each is parsed and planned once per connection.

:class:`PostgresDialect` (any driver) and :class:`AsyncpgDialect` (these statements) are
the memory's strategies for PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from mnemoscope.memory._base import MarkPlan, mark_pairs, marks_of
from mnemoscope.memory._sqlalchemy_common import first_occurrences
from mnemoscope.memory._sqlalchemy_dialect import SessionRows, SqlDialect
from mnemoscope.memory._sqlalchemy_raw import (
    fetch_value,
    run_retrying,
    transaction_probe,
)


def add_one_sql(prefix: str) -> str:
    """The statement for one message; parameters ``$1`` user, ``$2`` session, ``$3`` id,
    ``$4`` JSON, ``$5`` marks (array). Returns 1 when stored, 0 when the id already was."""
    s, m, k = f"{prefix}_sessions", f"{prefix}_messages", f"{prefix}_marks"
    return f"""
WITH bump AS (
  INSERT INTO {s} AS c (user_id, session_id, last_seq) VALUES ($1::text, $2::text, 1)
  ON CONFLICT (user_id, session_id) DO UPDATE SET last_seq = c.last_seq + 1
  RETURNING c.last_seq
), ins AS (
  INSERT INTO {m} (user_id, session_id, seq, msg_id, msg_json)
  SELECT $1::text, $2::text, b.last_seq, $3::text, $4::text FROM bump AS b
  ON CONFLICT (user_id, session_id, msg_id) DO NOTHING
  RETURNING msg_id, seq
), mk AS (
  INSERT INTO {k} (user_id, session_id, msg_id, mark, seq)
  SELECT $1::text, $2::text, i.msg_id, x.mark, i.seq
  FROM ins AS i CROSS JOIN unnest($5::text[]) AS x(mark)
)
SELECT count(*) FROM ins
"""


def add_ignore_sql(prefix: str, *, per_message: bool = False) -> str:
    """The statement; parameters ``$1`` user, ``$2`` session, ``$3`` ids, ``$4`` JSON
    documents, ``$5`` marks (arrays in batch order, ids unique); with ``per_message``,
    ``$5`` the ids and ``$6`` the marks of ``(msg_id, mark)`` pairs. Returns the count of
    messages inserted."""
    s, m, k = f"{prefix}_sessions", f"{prefix}_messages", f"{prefix}_marks"
    marks = (
        "JOIN unnest($5::text[], $6::text[]) AS x(msg_id, mark) ON x.msg_id = i.msg_id"
        if per_message
        else "CROSS JOIN unnest($5::text[]) AS x(mark)"
    )
    return f"""
WITH probe AS (
  SELECT n.ord, n.msg_id, n.msg_json,
         (SELECT o.seq FROM {m} AS o
          WHERE o.user_id = $1::text AND o.session_id = $2::text AND o.msg_id = n.msg_id
         ) AS stored
  FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS n(msg_id, msg_json, ord)
), fresh AS (
  SELECT ord, msg_id, msg_json FROM probe WHERE stored IS NULL
), bump AS (
  INSERT INTO {s} AS c (user_id, session_id, last_seq)
  SELECT $1::text, $2::text, count(*) FROM fresh
  ON CONFLICT (user_id, session_id) DO UPDATE SET last_seq = c.last_seq + excluded.last_seq
  RETURNING c.last_seq
), ins AS (
  INSERT INTO {m} (user_id, session_id, seq, msg_id, msg_json)
  SELECT $1::text, $2::text,
         b.last_seq - (SELECT count(*) FROM fresh) + row_number() OVER (ORDER BY f.ord),
         f.msg_id, f.msg_json
  FROM fresh AS f CROSS JOIN bump AS b
  ORDER BY f.ord
  ON CONFLICT (user_id, session_id, msg_id) DO NOTHING
  RETURNING msg_id, seq
), mk AS (
  INSERT INTO {k} (user_id, session_id, msg_id, mark, seq)
  SELECT $1::text, $2::text, i.msg_id, x.mark, i.seq
  FROM ins AS i {marks}
)
SELECT count(*) FROM ins
"""


class PgAddSql:
    """The three add statements of a table prefix (built once per memory)."""

    def __init__(self, prefix: str) -> None:
        self.one = add_one_sql(prefix)
        self.batch = add_ignore_sql(prefix)
        self.pairs = add_ignore_sql(prefix, per_message=True)


def pg_add_statement(
    sql: PgAddSql, user: str, session: str, payload: list[tuple[str, str]], plan: MarkPlan
) -> tuple[str, tuple[Any, ...]]:
    """The statement and parameters storing ``payload`` (``(id, JSON)`` in batch order; a
    repeated id keeps its first content) with the marks of ``plan``."""
    first = first_occurrences(payload)
    if len(first) == 1:
        ((msg_id, data),) = first.items()
        return sql.one, (user, session, msg_id, data, marks_of(plan, msg_id))
    ids, docs = list(first), list(first.values())
    if isinstance(plan, list):
        return sql.batch, (user, session, ids, docs, plan)
    pairs = mark_pairs(plan, first)
    return sql.pairs, (user, session, ids, docs, [i for i, _ in pairs], [m for _, m in pairs])


class PostgresDialect(SqlDialect):
    """PostgreSQL with any asyncio driver: deletes bind the ids as one array."""

    async def delete_ids(self, conn: AsyncConnection, ids: Sequence[str]) -> int:
        # one array parameter: one statement per table (messages first, see the base)
        t, k, where = self.rows.messages, self.rows.marks, self.rows.where
        arr = sa.bindparam("ids", list(ids), type_=ARRAY(sa.Text()))
        res = await conn.execute(sa.delete(t).where(where(t), t.c.msg_id == sa.any_(arr)))
        await conn.execute(sa.delete(k).where(where(k), k.c.msg_id == sa.any_(arr)))
        return int(res.rowcount)


class AsyncpgDialect(PostgresDialect):
    """PostgreSQL through asyncpg: an ignore-add is one statement in autocommit and ``get``
    one statement, both on the pooled driver connection (``_sqlalchemy_raw``)."""

    def __init__(self, engine: AsyncEngine, rows: SessionRows) -> None:
        super().__init__(engine, rows)
        self.sql = PgAddSql(rows.prefix)

    async def add(self, payload: list[tuple[str, str]], plan: MarkPlan, on_duplicate: str) -> int:
        if on_duplicate != "ignore":
            return await super().add(payload, plan, on_duplicate)
        r = self.rows
        sql, args = pg_add_statement(self.sql, r.user_id, r.session_id, payload, plan)
        return await run_retrying(
            self.engine, fetch_value(sql, args), _clean, what="AsyncSQLAlchemyMemory.add", hold=True
        )

    async def read(self, want: list[str], skip: list[str], last_n: int | None) -> list[Any]:
        return await self.read_on_driver("numeric", _clean, want, skip, last_n)


_clean = transaction_probe("postgresql")
