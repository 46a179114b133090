"""MariaDB fast path of :class:`~mnemoscope.memory.AsyncSQLAlchemyMemory`.

``add(..., on_duplicate="ignore")`` is one statement: an anonymous compound statement
(``BEGIN NOT ATOMIC ... END``, MariaDB 10.1.1 and later) that runs its own transaction, so
the whole add is one round trip and one commit. It needs no client flag (not
``MULTI_STATEMENTS``), so it works on engines the caller passes in. Its steps:

1. ``START TRANSACTION``; take the session's counter row lock
   (``INSERT ... ON DUPLICATE KEY UPDATE`` creates the row on the session's first write,
   then ``SELECT ... FOR UPDATE`` reads ``last_seq``). Writers of one session are therefore
   serialised exactly as on the transactional path: a batch's positions are contiguous and
   commit order is position order;
   (one message: :func:`add_one_sql`, ``INSERT ... VALUES`` whose duplicate-key error
   rolls the transaction back and returns 0);
2. insert the batch's ids that are not stored yet (``NOT EXISTS`` probe of the unique
   ``(user_id, session_id, msg_id)`` index), numbered from ``last_seq + 1`` in batch order;
3. advance ``last_seq`` by the number inserted; insert the marks of the inserted rows
   (those with ``seq > last_seq`` before the add: only this transaction can have written
   them, it holds the counter lock);
4. ``COMMIT`` and return the number inserted as a one-row result.

If a step fails (deadlock, lock wait timeout, dropped connection) the block stops with the
error before its ``COMMIT``; the open transaction is rolled back when the connection goes
back to the pool (or by the server when the connection is gone), and the caller retries
(an ignore-add is idempotent, so retrying after an unknown ``COMMIT`` outcome is safe too).

MySQL has no anonymous compound statements: it uses the transactional path.

Key columns (ids and marks) use a binary NO PAD collation (:func:`key_collation`); tables
of the older ``utf8mb4_bin`` schema, which ignores trailing spaces in comparisons, are
detected (:data:`KEY_COLUMNS_SQL`) and converted by :func:`upgrade_statements`.

:class:`MySQLDialect` (any driver) and :class:`AiomysqlDialect` (the block, reads on the
driver connection) are the memory's strategies for MySQL and MariaDB.
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory._base import MarkPlan, mark_pairs, marks_of
from mnemoscope.memory._sqlalchemy_common import chunks, first_occurrences, shared_tables
from mnemoscope.memory._sqlalchemy_dialect import SqlDialect
from mnemoscope.memory._sqlalchemy_raw import (
    driver_error_code,
    fetch_one,
    run_retrying,
    transaction_probe,
)

MIN_MARIADB = (10, 2)  # BEGIN NOT ATOMIC (10.1.1), window functions (10.2), NO PAD (10.2)
MIN_MYSQL = (8, 0, 17)  # utf8mb4_0900_bin
MARIADB_COLLATION = "utf8mb4_nopad_bin"
MYSQL_COLLATION = "utf8mb4_0900_bin"

KEY_COLUMNS = {
    "sessions": ("user_id", "session_id"),
    "messages": ("user_id", "session_id", "msg_id"),
    "marks": ("user_id", "session_id", "msg_id", "mark"),
}
"""The id and mark columns of each table (``<prefix>_<name>``)."""

KEY_COLUMNS_SQL = (
    "SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (%s, %s, %s) "
    "AND COLUMN_NAME IN ('user_id', 'session_id', 'msg_id', 'mark')"
)
"""The collations of the key columns (parameters: the three table names)."""


def key_collation(dialect: Any) -> str:
    """The binary NO PAD collation for ids and marks on this server (after its first connect).

    Raises:
        UserError: a server without one (MariaDB before 10.2, MySQL before 8.0.17).
    """
    version = tuple(getattr(dialect, "server_version_info", None) or ())
    if getattr(dialect, "is_mariadb", False):
        if version and version[:2] < MIN_MARIADB:
            raise UserError(
                f"AsyncSQLAlchemyMemory needs MariaDB 10.2 or later (NO PAD collations), "
                f"found {'.'.join(map(str, version))}"
            )
        return MARIADB_COLLATION
    if version and version[:3] < MIN_MYSQL:
        raise UserError(
            f"AsyncSQLAlchemyMemory needs MySQL 8.0.17 or later (utf8mb4_0900_bin, a collation "
            f"that does not ignore trailing spaces), found {'.'.join(map(str, version))}"
        )
    return MYSQL_COLLATION


def upgrade_statements(
    prefix: str, collation: str, columns: Iterable[tuple[str, str, str | None]]
) -> list[str]:
    """The ``ALTER TABLE`` statements converting key columns whose collation is not
    ``collation``; ``columns`` are rows of :data:`KEY_COLUMNS_SQL`. Converting to a NO PAD
    binary collation only makes more ids distinct, so unique keys stay valid."""
    wrong: dict[str, set[str]] = {}
    for table, column, current in columns:
        if current != collation:
            wrong.setdefault(str(table).lower(), set()).add(str(column).lower())
    out = []
    for name, key_columns in KEY_COLUMNS.items():
        bad = wrong.get(f"{prefix}_{name}".lower())
        if bad:
            mods = ", ".join(
                f"MODIFY {c} VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"
                for c in key_columns
                if c in bad
            )
            out.append(f"ALTER TABLE {prefix}_{name} {mods}")
    return out


def _key(collation: str) -> str:
    return f"VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {collation}"


def supports_block(dialect: Any) -> bool:
    """Whether ``dialect`` (after its first connect) is a MariaDB that runs the block."""
    if not getattr(dialect, "is_mariadb", False):
        return False
    version = getattr(dialect, "server_version_info", None) or ()
    return tuple(version[:2]) >= MIN_MARIADB


def _lock_counter(sessions: str, bump: int) -> str:
    """Start a transaction holding the session's counter row lock, its ``last_seq``
    advanced by ``bump`` (the row is created on the session's first write) and read into
    the variable ``base``."""
    return f"""  START TRANSACTION;
  INSERT INTO {sessions} (user_id, session_id, last_seq) VALUES (u, s, {bump})
    ON DUPLICATE KEY UPDATE last_seq = last_seq + {bump};
  SELECT last_seq INTO base FROM {sessions} WHERE user_id = u AND session_id = s FOR UPDATE;"""


def _block_head(sessions: str, collation: str, declare: str, *, bump: int) -> str:
    """The start of an add block: user ``u`` and session ``s`` (the first two ``%s``
    parameters), ``declare`` (more variables), ``base``, then :func:`_lock_counter`."""
    return f"""BEGIN NOT ATOMIC
  DECLARE u {_key(collation)} DEFAULT %s;
  DECLARE s {_key(collation)} DEFAULT %s;
  {declare}
  DECLARE base BIGINT DEFAULT 0;
{_lock_counter(sessions, bump)}"""


def _rows_sql(count: int, collation: str) -> str:
    # the first branch fixes the derived table's column types and collations
    first = (
        f"SELECT %s AS ord, CONVERT(%s USING utf8mb4) COLLATE {collation} AS msg_id, "
        "CONVERT(%s USING utf8mb4) AS msg_json"
    )
    return " UNION ALL ".join([first] + ["SELECT %s, %s, %s"] * (count - 1))


@functools.lru_cache(maxsize=256)
def add_ignore_sql(
    prefix: str, count: int, mark_count: int, collation: str = MARIADB_COLLATION
) -> str:
    """The block for ``count`` distinct ids and ``mark_count`` ``(msg_id, mark)`` pairs
    (``%s`` parameters, see :func:`add_ignore_statement`). Its one-row result is the number
    of messages inserted."""
    s, m, k = f"{prefix}_sessions", f"{prefix}_messages", f"{prefix}_marks"
    marks = ""
    if mark_count:
        pairs = " UNION ALL ".join(
            [
                f"SELECT CONVERT(%s USING utf8mb4) COLLATE {collation} AS msg_id, "
                f"CONVERT(%s USING utf8mb4) COLLATE {collation} AS mark"
            ]
            + ["SELECT %s, %s"] * (mark_count - 1)
        )
        marks = f"""
  IF n > 0 THEN
    INSERT INTO {k} (user_id, session_id, msg_id, mark, seq)
    SELECT u, s, i.msg_id, x.mark, i.seq FROM ({pairs}) AS x
    JOIN {m} AS i ON i.user_id = u AND i.session_id = s AND i.msg_id = x.msg_id
    WHERE i.seq > base;
  END IF;"""
    head = _block_head(s, collation, "DECLARE n BIGINT DEFAULT 0;", bump=0)
    return f"""{head}
  INSERT INTO {m} (user_id, session_id, seq, msg_id, msg_json)
  SELECT u, s, base + ROW_NUMBER() OVER (ORDER BY b.ord), b.msg_id, b.msg_json
  FROM ({_rows_sql(count, collation)}) AS b
  WHERE NOT EXISTS (SELECT 1 FROM {m} AS o
                    WHERE o.user_id = u AND o.session_id = s AND o.msg_id = b.msg_id);
  SET n = ROW_COUNT();
  IF n > 0 THEN
    UPDATE {s} SET last_seq = base + n WHERE user_id = u AND session_id = s;
  END IF;{marks}
  COMMIT;
  SELECT n;
END"""


ADD_ONE_PROCEDURE = "{prefix}_add_one_v1"
"""The stored procedure a single ignore-add calls (MariaDB), created with the tables when
the user may (``CREATE ROUTINE``); the version changes with its body."""

_DOC = "LONGTEXT CHARACTER SET utf8mb4"


def _add_one_body(prefix: str) -> str:
    """The work of a single add, after the variables ``u``, ``s``, ``i`` (user, session,
    message id), ``doc`` (its JSON) and ``marks`` (a JSON array) are declared: bump the
    counter, insert with ``VALUES`` and, when the id is already stored (error 1062, caught
    for that one statement only), roll the bump back and return 0; else insert the marks,
    commit and return 1."""
    s, m, k = f"{prefix}_sessions", f"{prefix}_messages", f"{prefix}_marks"
    # the counter row's new value comes back through LAST_INSERT_ID(expr), set on either
    # branch of the upsert (which locks the row until commit): no second read of it
    return f"""  DECLARE base BIGINT DEFAULT 0;
  DECLARE dup INT DEFAULT 0;
  DECLARE n INT DEFAULT 0;
  START TRANSACTION;
  INSERT INTO {s} (user_id, session_id, last_seq) VALUES (u, s, LAST_INSERT_ID(1))
    ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(last_seq + 1);
  SET base = LAST_INSERT_ID();
  BEGIN
    DECLARE CONTINUE HANDLER FOR 1062 SET dup = 1;
    INSERT INTO {m} (user_id, session_id, seq, msg_id, msg_json) VALUES (u, s, base, i, doc);
  END;
  IF dup THEN
    -- checked before the ROLLBACK: a read after it would leave a transaction (and its
    -- snapshot) open on the connection, which the server does not report
    IF NOT EXISTS (SELECT 1 FROM {m} WHERE user_id = u AND session_id = s AND msg_id = i) THEN
      ROLLBACK;
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'position already used: session counter is behind';
    END IF;
    ROLLBACK;
    SELECT 0;
  ELSE
    WHILE n < JSON_LENGTH(marks) DO
      INSERT INTO {k} (user_id, session_id, msg_id, mark, seq)
        VALUES (u, s, i, JSON_VALUE(marks, CONCAT('$[', n, ']')), base);
      SET n = n + 1;
    END WHILE;
    COMMIT;
    SELECT 1;
  END IF;
END"""


@functools.lru_cache(maxsize=64)
def add_one_sql(prefix: str, collation: str = MARIADB_COLLATION) -> str:
    """The block for one message: parameters user, session, id, JSON, marks (a JSON
    array). Cheaper than :func:`add_ignore_sql` for one row (no derived tables); the
    server parses it on every call, which :func:`add_one_procedure_sql` avoids."""
    key = _key(collation)
    return f"""BEGIN NOT ATOMIC
  DECLARE u {key} DEFAULT %s;
  DECLARE s {key} DEFAULT %s;
  DECLARE i {key} DEFAULT %s;
  DECLARE doc {_DOC} DEFAULT %s;
  DECLARE marks {_DOC} DEFAULT %s;
{_add_one_body(prefix)}"""


def add_one_procedure_sql(prefix: str, collation: str = MARIADB_COLLATION) -> str:
    """``CREATE PROCEDURE`` of :data:`ADD_ONE_PROCEDURE`: the block of
    :func:`add_one_sql` compiled once per connection instead of parsed on every call (a
    third of a millisecond: a third of a one-row commit on a fast disk)."""
    key, name = _key(collation), ADD_ONE_PROCEDURE.format(prefix=prefix)
    return f"""CREATE PROCEDURE {name}(u {key}, s {key}, i {key}, doc {_DOC}, marks {_DOC})
BEGIN
{_add_one_body(prefix)}"""


async def ensure_add_one_procedure(
    conn: AsyncConnection, prefix: str, collation: str
) -> str | None:
    """Create :data:`ADD_ONE_PROCEDURE` for ``prefix`` unless it exists; its name, or
    ``None`` when it cannot be created (no ``CREATE ROUTINE`` privilege, a name over 64
    characters): single adds then send the block."""
    name = ADD_ONE_PROCEDURE.format(prefix=prefix)
    if len(name) > 64:
        return None
    found = await conn.exec_driver_sql(ROUTINE_SQL, (name,))
    if found.first() is not None:
        return name
    try:
        await conn.exec_driver_sql(add_one_procedure_sql(prefix, collation))
    except sa.exc.DBAPIError as exc:
        _, number = driver_error_code(exc.orig) if exc.orig is not None else (None, None)
        return name if number == 1304 else None  # 1304: created meanwhile by another process
    return name


_NO_SUCH_PROCEDURE = 1305

ROUTINE_SQL = (
    "SELECT 1 FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() "
    "AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME = %s"
)

# engine -> table prefix -> the procedure single adds call (None: send the block)
_PROCEDURES: weakref.WeakKeyDictionary[Any, dict[str, str | None]] = weakref.WeakKeyDictionary()


def add_ignore_statement(
    prefix: str,
    user_id: str,
    session_id: str,
    first: dict[str, str],
    marks: MarkPlan,
    collation: str = MARIADB_COLLATION,
    procedure: str | None = None,
) -> tuple[str, tuple[Any, ...]]:
    """The block and its parameters; ``first`` maps each distinct id (in batch order) to
    its JSON, ``marks`` gives their marks (:func:`~mnemoscope.memory._base.plan_marks`);
    ``collation`` is the key columns' (:func:`key_collation`). One message calls
    ``procedure`` when there is one (:func:`ensure_add_one_procedure`)."""
    if len(first) == 1:
        ((msg_id, data),) = first.items()
        args = (user_id, session_id, msg_id, data, json.dumps(marks_of(marks, msg_id)))
        if procedure is not None:
            return f"CALL {procedure}(%s, %s, %s, %s, %s)", args
        return add_one_sql(prefix, collation), args
    params: list[Any] = [user_id, session_id]
    for n, (msg_id, data) in enumerate(first.items()):
        params += (n, msg_id, data)
    pairs = mark_pairs(marks, first)
    for pair in pairs:
        params += pair
    return add_ignore_sql(prefix, len(first), len(pairs), collation), tuple(params)


DELETE_CHUNK = 5000  # ids per DELETE; measured faster than 500 or 1000 (fewer statements)


def delete_ids_sql(prefix: str, count: int) -> tuple[str, str]:
    """``DELETE`` of ``count`` ids from the messages, then the marks table (``%s``
    parameters: user, session, ids), to be run in that order: the messages' row locks
    make a concurrent ``update_marks`` finish before its marks are deleted. Written as
    driver SQL: compiling an expanding ``IN`` through SQLAlchemy costs more than the
    server's work at these sizes."""
    ids = ", ".join(["%s"] * count)
    where = f"WHERE user_id = %s AND session_id = %s AND msg_id IN ({ids})"
    return f"DELETE FROM {prefix}_messages {where}", f"DELETE FROM {prefix}_marks {where}"


class MySQLDialect(SqlDialect):
    """MySQL and MariaDB with any asyncio driver: key columns in the server's NO PAD
    collation, positions through ``LAST_INSERT_ID``, deletes as driver SQL."""

    async def prepare_tables(self, conn: AsyncConnection, *, upgrade: bool) -> list[str]:
        # the server is known once connected; ids need its NO PAD collation
        prefix = self.rows.prefix
        collation = key_collation(conn.dialect)
        _, messages, _ = shared_tables(prefix, collation)
        await conn.run_sync(messages.metadata.create_all, checkfirst=True)
        names = tuple(f"{prefix}_{n}" for n in KEY_COLUMNS)
        result = await conn.exec_driver_sql(KEY_COLUMNS_SQL, names)
        rows: list[Any] = list(result)
        columns = [(str(r[0]), str(r[1]), r[2]) for r in rows]
        pending = upgrade_statements(prefix, collation, columns)
        if upgrade:
            for statement in pending:
                await conn.exec_driver_sql(statement)
        return pending

    async def bump_counter(self, conn: AsyncConnection, count: int) -> int | None:
        # no RETURNING: the new value comes back in the OK packet as the insert id
        c = self.rows.sessions
        bumped = await conn.execute(
            sa.update(c)
            .where(self.rows.where(c))
            .values(last_seq=sa.func.last_insert_id(c.c.last_seq + count))
        )
        return bumped.lastrowid if bumped.rowcount else None

    async def delete_ids(self, conn: AsyncConnection, ids: Sequence[str]) -> int:
        deleted = 0
        for chunk in chunks(ids, DELETE_CHUNK):  # messages first, see the base
            msgs_sql, marks_sql = delete_ids_sql(self.rows.prefix, len(chunk))
            args = (self.rows.user_id, self.rows.session_id, *chunk)
            deleted += (await conn.exec_driver_sql(msgs_sql, args)).rowcount
            await conn.exec_driver_sql(marks_sql, args)
        return deleted


class AiomysqlDialect(MySQLDialect):
    """MySQL and MariaDB through aiomysql: ``get`` is one statement on the pooled driver
    connection (``_sqlalchemy_raw``), and on MariaDB an ignore-add is one block."""

    _row_by_row = False  # a joined read of this session could not be used

    async def prepare_tables(self, conn: AsyncConnection, *, upgrade: bool) -> list[str]:
        pending = await super().prepare_tables(conn, upgrade=upgrade)
        if supports_block(conn.dialect) and not pending:
            prefix = self.rows.prefix
            name = await ensure_add_one_procedure(conn, prefix, key_collation(conn.dialect))
            _PROCEDURES.setdefault(self.engine.sync_engine, {})[prefix] = name
        return pending

    async def add(self, payload: list[tuple[str, str]], plan: MarkPlan, on_duplicate: str) -> int:
        dialect = self.engine.dialect  # knows the server: the memory has connected
        if on_duplicate != "ignore" or not supports_block(dialect):
            return await super().add(payload, plan, on_duplicate)
        r = self.rows
        procedures = _PROCEDURES.setdefault(self.engine.sync_engine, {})
        first = first_occurrences(payload)
        collation = key_collation(dialect)
        while True:
            procedure = procedures.get(r.prefix)
            sql, args = add_ignore_statement(
                r.prefix, r.user_id, r.session_id, first, plan, collation, procedure
            )
            clean = transaction_probe("mysql")
            try:
                return await run_retrying(
                    self.engine,
                    fetch_one(sql, args),
                    clean,
                    what="AsyncSQLAlchemyMemory.add",
                    hold=True,
                )
            except MemoryStoreError as exc:
                _, number = driver_error_code(exc.__cause__ or exc)
                if procedure is None or number != _NO_SUCH_PROCEDURE:
                    raise
                procedures[r.prefix] = None  # dropped behind our back: send the block

    async def read(self, want: list[str], skip: list[str], last_n: int | None) -> list[Any]:
        clean = transaction_probe("mysql", read=True)
        return await self.read_on_driver("format", clean, want, skip, last_n)

    async def read_joined(
        self, want: list[str], skip: list[str], last_n: int | None
    ) -> tuple[int, int, str] | None:
        # MySQL has no SET STATEMENT
        if self._row_by_row or not supports_block(self.engine.dialect):
            return None
        clean = transaction_probe("mysql", read=True)
        rows = await self.read_on_driver("format", clean, want, skip, last_n, joined=True)
        count, id_crc_sum, chars, docs = rows[0]
        if not count:
            return 0, 0, ""
        if docs is None or len(docs) != int(chars) + count - 1:
            # cut at max_allowed_packet: this session is read row by row from now on,
            # rather than paying a server warning and a second query each time
            self._row_by_row = True
            return None
        return int(count), int(id_crc_sum), docs
