"""Tables, pure helpers and the one retry loop shared by the paths of
:class:`AsyncSQLAlchemyMemory`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from mnemoscope.errors import MemoryStoreError, UserError

MAX_KEY_LENGTH = 128
CHUNK = 500  # ids per IN (...) clause
ATTEMPTS = 5  # transient errors (locked file, deadlock, concurrent duplicate insert)
_T = TypeVar("_T")

MYSQL_KEY_COLLATION = "utf8mb4_nopad_bin"
"""The collation of id and mark columns on MariaDB (MySQL 8: ``utf8mb4_0900_bin``): binary,
so case-sensitive, and NO PAD, so ``"alice"`` and ``"alice "`` are different ids (the
``utf8mb4_bin`` of older versions of this store ignores trailing spaces)."""


def _key_type(mysql_collation: str) -> sa.types.TypeEngine[Any]:
    return sa.String(MAX_KEY_LENGTH).with_variant(
        mysql.VARCHAR(MAX_KEY_LENGTH, charset="utf8mb4", collation=mysql_collation),
        "mysql",
        "mariadb",
    )


_JSON_TEXT = sa.Text().with_variant(mysql.LONGTEXT(charset="utf8mb4"), "mysql", "mariadb")
_SEQ = sa.BigInteger()


def make_tables(
    table_prefix: str, mysql_collation: str = MYSQL_KEY_COLLATION
) -> tuple[sa.Table, sa.Table, sa.Table]:
    """The ``(sessions, messages, marks)`` tables for a prefix, on a fresh ``MetaData``.

    ``mysql_collation`` is the collation of the key columns in MySQL/MariaDB DDL (it does
    not change the queries built from the tables)."""
    md = sa.MetaData()
    key = _key_type(mysql_collation)

    def scoped(name: str, *columns: sa.Column[Any] | sa.Constraint | sa.Index) -> sa.Table:
        """A table whose rows each belong to one user's session: those two key columns
        first, then ``columns``."""
        return sa.Table(
            f"{table_prefix}_{name}",
            md,
            sa.Column("user_id", key, nullable=False),
            sa.Column("session_id", key, nullable=False),
            *columns,
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )

    sessions = scoped(
        "sessions",
        sa.Column("last_seq", _SEQ, nullable=False),
        sa.PrimaryKeyConstraint("user_id", "session_id"),
    )
    messages = scoped(
        "messages",
        sa.Column("seq", _SEQ, nullable=False, autoincrement=False),
        sa.Column("msg_id", key, nullable=False),
        sa.Column("msg_json", _JSON_TEXT, nullable=False),
        sa.PrimaryKeyConstraint("user_id", "session_id", "seq"),
        sa.UniqueConstraint("user_id", "session_id", "msg_id", name=f"{table_prefix}_msg_uq"),
    )
    marks = scoped(
        "marks",
        sa.Column("msg_id", key, nullable=False),
        sa.Column("mark", key, nullable=False),
        sa.Column("seq", _SEQ, nullable=False),
        sa.PrimaryKeyConstraint("user_id", "session_id", "msg_id", "mark"),
        sa.Index(f"{table_prefix}_mark_ix", "user_id", "session_id", "mark", "seq"),
    )
    return sessions, messages, marks


@functools.lru_cache(maxsize=64)
def shared_tables(
    table_prefix: str, mysql_collation: str = MYSQL_KEY_COLLATION
) -> tuple[sa.Table, sa.Table, sa.Table]:
    """:func:`make_tables`, built once per prefix and collation and shared by every memory of
    the process.

    Building the three tables costs about a millisecond (SQLAlchemy's column and constraint
    set-up), which a service that opens a memory per request paid on every reply. The
    tables are only read by the statements built from them, so sharing them is safe."""
    return make_tables(table_prefix, mysql_collation)


def chunks(items: Sequence[_T], size: int = CHUNK) -> Iterator[Sequence[_T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def check_key(kind: str, value: str) -> None:
    if len(value) > MAX_KEY_LENGTH:
        raise UserError(
            f"AsyncSQLAlchemyMemory: {kind} is {len(value)} characters long; the limit is "
            f"{MAX_KEY_LENGTH}: {value[:40]!r}..."
        )


def first_occurrences(payload: list[tuple[str, str]]) -> dict[str, str]:
    """id -> content of its first occurrence, in order of first occurrence."""
    out: dict[str, str] = {}
    for msg_id, data in payload:
        out.setdefault(msg_id, data)
    return out


def plan_add(
    payload: list[tuple[str, str]], existing: dict[str, int], on_duplicate: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Split a batch into ``(new, replace)``: id -> JSON to insert, and to overwrite.

    ``existing`` maps the stored ids of the batch to their positions. A repeated id inside
    the batch keeps its first position; its content is the first (``"ignore"``) or the
    last (``"replace"``, ``"error"``) occurrence's.

    Raises:
        MemoryStoreError: ``on_duplicate="error"`` and some id is already stored.
    """
    if on_duplicate == "error" and existing:
        raise MemoryStoreError(
            f"message ids already stored: {sorted(existing)[:5]}; pass "
            "on_duplicate='ignore' or 'replace'"
        )
    new: dict[str, str] = {}
    replace: dict[str, str] = {}
    for msg_id, data in payload:
        if msg_id in existing:
            if on_duplicate != "ignore":
                replace[msg_id] = data
        elif msg_id in new:
            if on_duplicate != "ignore":
                new[msg_id] = data  # keeps its position, takes the later content
        else:
            new[msg_id] = data
    return new, replace


def transient(exc: sa.exc.DBAPIError) -> bool:
    """A dropped connection, deadlock, lock timeout or concurrent duplicate: retry."""
    if exc.connection_invalidated or isinstance(exc, sa.exc.IntegrityError):
        return True
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code and (code in ("40001", "40P01", "55P03") or code[:2] in ("08", "57")):
        return True
    args = getattr(orig, "args", ())
    if args and args[0] in (1205, 1213, 2006, 2013):  # lock wait, deadlock, gone away
        return True
    text = str(orig).lower()
    return "database is locked" in text or ("connection" in text and "closed" in text)


async def retrying(
    call: Callable[[], Awaitable[_T]],
    *,
    catch: type[BaseException] | tuple[type[BaseException], ...],
    transient: Callable[[Any], bool],
    what: str,
    attempts: int = ATTEMPTS,
) -> _T:
    """``await call()``, again with backoff while it fails with a transient error.

    Every retried operation of the store runs through here (SQLAlchemy transactions, the
    driver statements, the SQLite worker). An exception of a type in ``catch`` is judged
    by ``transient(exc)``: retried if true, else raised as
    :class:`~mnemoscope.errors.MemoryStoreError` naming ``what``, as is the last failure
    when every attempt failed. Anything else (our own errors, a cancellation) propagates
    unchanged. ``call`` must be safe to repeat.
    """
    for attempt in range(attempts):
        try:
            return await call()
        except catch as exc:
            if not transient(exc):
                raise MemoryStoreError(f"{what} failed: {exc}") from exc
            last = exc
        if attempt + 1 < attempts:
            await asyncio.sleep(0.01 * 2**attempt)
    raise MemoryStoreError(f"{what} failed after {attempts} attempts: {last}") from last


ReadParams = Callable[[str, str, list[str], list[str], int], tuple[Any, ...]]


@functools.lru_cache(maxsize=128)
def read_sql(
    prefix: str, style: str, wanted: int, excluded: int, limit: bool, joined: bool = False
) -> tuple[str, ReadParams]:
    """``get``'s query, written out per driver, and the function building its parameters
    from ``(user, session, wanted marks, excluded marks, last_n)``.

    ``style`` is ``"numeric"`` (asyncpg: ``$n``, marks as arrays), ``"format"`` (aiomysql:
    ``%s``) or ``"qmark"`` (sqlite3: ``?``); ``wanted``/``excluded`` the number of marks.
    Rows are ``(msg_id, msg_json)`` in position order, or newest first with ``limit``.
    With ``joined`` (``"format"`` on MariaDB) the query returns one row instead
    (:func:`joined_sql`).
    The marks are looked up first (the ``(user, session, mark, seq)`` index), then the
    messages by primary key: on PostgreSQL as ``seq = ANY(ARRAY(subquery))``, one index
    scan with the positions as an array condition (once the tables have statistics;
    autovacuum analyses them within a minute of a bulk load).
    """
    m, k = f"{prefix}_messages", f"{prefix}_marks"
    if style == "numeric":
        sql = f"SELECT msg_id, msg_json FROM {m} WHERE user_id = $1 AND session_id = $2"
        sub = f"SELECT seq FROM {k} WHERE user_id = $1 AND session_id = $2 AND mark = ANY"
        n = 2
        if wanted:
            n += 1
            sql += f" AND seq = ANY(ARRAY({sub}(${n}::text[])))"
        if excluded:
            n += 1
            sql += f" AND seq <> ALL(ARRAY({sub}(${n}::text[])))"
        sql += f" ORDER BY seq DESC LIMIT ${n + 1}" if limit else " ORDER BY seq"

        def arrays(u: str, s: str, want: list[str], skip: list[str], last: int) -> tuple[Any, ...]:
            args: list[Any] = [u, s]
            if wanted:
                args.append(want)
            if excluded:
                args.append(skip)
            if limit:
                args.append(last)
            return tuple(args)

        return sql, arrays
    mark = "?" if style == "qmark" else "%s"
    cols = "seq, msg_id, msg_json" if joined else "msg_id, msg_json"
    key = f"user_id = {mark} AND session_id = {mark}"
    sql = f"SELECT {cols} FROM {m} WHERE {key}"
    if wanted:
        sql += f" AND seq IN (SELECT seq FROM {k} WHERE {key} AND mark IN ({_slots(mark, wanted)}))"
    if excluded:
        sql += (
            f" AND seq NOT IN (SELECT seq FROM {k} WHERE {key} AND mark IN "
            f"({_slots(mark, excluded)}))"
        )
    if joined:
        sql = joined_sql(sql, f" ORDER BY seq DESC LIMIT {mark}" if limit else "")
    else:
        sql += f" ORDER BY seq DESC LIMIT {mark}" if limit else " ORDER BY seq"

    def positional(u: str, s: str, want: list[str], skip: list[str], last: int) -> tuple[Any, ...]:
        args: list[Any] = [u, s]
        if want:
            args += (u, s, *want)
        if skip:
            args += (u, s, *skip)
        if limit:
            args.append(last)
        return tuple(args)

    return sql, positional


def joined_sql(rows_sql: str, tail: str) -> str:
    """MariaDB: ``rows_sql`` (``SELECT seq, msg_id, msg_json FROM ... WHERE ...``, ``tail``
    its order and limit) aggregated into one row: the number of rows, the sum of the
    ids' CRC-32, the sum of the documents' lengths in characters, and the documents
    joined by ``,`` in position order (a JSON array without its brackets). aiomysql then
    parses one row instead of one per message (a few microseconds each, in Python), and
    the documents are validated in one call
    (:func:`~mnemoscope.memory._msg_json.decode_counted`); the checksum costs the server
    far less than a second ordered ``GROUP_CONCAT`` of the ids.

    ``group_concat_max_len`` is raised to ``max_allowed_packet`` for this statement only
    (``SET STATEMENT ... FOR``, MariaDB 10.1.2 and later); a session too large for that
    comes back cut (with a server warning), which the lengths tell, and is read row by row.
    """
    return (
        "SET STATEMENT group_concat_max_len = @@max_allowed_packet FOR "
        "SELECT COUNT(*), SUM(CRC32(msg_id)), SUM(CHAR_LENGTH(msg_json)), "
        "GROUP_CONCAT(msg_json ORDER BY seq SEPARATOR ',') "
        f"FROM ({rows_sql}{tail}) AS r"
    )


def _slots(mark: str, count: int) -> str:
    return ", ".join([mark] * count)
