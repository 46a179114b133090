"""Tables and pure helpers shared by the paths of :class:`AsyncSQLAlchemyMemory`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from mnemoscope.errors import MemoryStoreError, UserError

MAX_KEY_LENGTH = 128
CHUNK = 500  # ids per IN (...) clause
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
    opts: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}
    sessions = sa.Table(
        f"{table_prefix}_sessions",
        md,
        sa.Column("user_id", key, nullable=False),
        sa.Column("session_id", key, nullable=False),
        sa.Column("last_seq", _SEQ, nullable=False),
        sa.PrimaryKeyConstraint("user_id", "session_id"),
        **opts,
    )
    messages = sa.Table(
        f"{table_prefix}_messages",
        md,
        sa.Column("user_id", key, nullable=False),
        sa.Column("session_id", key, nullable=False),
        sa.Column("seq", _SEQ, nullable=False, autoincrement=False),
        sa.Column("msg_id", key, nullable=False),
        sa.Column("msg_json", _JSON_TEXT, nullable=False),
        sa.PrimaryKeyConstraint("user_id", "session_id", "seq"),
        sa.UniqueConstraint("user_id", "session_id", "msg_id", name=f"{table_prefix}_msg_uq"),
        **opts,
    )
    marks = sa.Table(
        f"{table_prefix}_marks",
        md,
        sa.Column("user_id", key, nullable=False),
        sa.Column("session_id", key, nullable=False),
        sa.Column("msg_id", key, nullable=False),
        sa.Column("mark", key, nullable=False),
        sa.Column("seq", _SEQ, nullable=False),
        sa.PrimaryKeyConstraint("user_id", "session_id", "msg_id", "mark"),
        sa.Index(f"{table_prefix}_mark_ix", "user_id", "session_id", "mark", "seq"),
        **opts,
    )
    return sessions, messages, marks


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
