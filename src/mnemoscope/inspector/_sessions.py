"""Read-only, paginated access to the sessions of a short-term memory store, per user.

Example::

    reader = session_reader_from_url("sqlite+aiosqlite:///sessions.db")
    sessions = await reader.list_sessions("alice")          # [SessionSummary, ...]
    page = await reader.page("alice", "s1", offset=0, limit=100)
    await reader.aclose()

The backends offer no "list the sessions of a user" call and read only whole sessions or
their tail, so the reader works directly against their documented layouts (read only,
never a write):

* :class:`~mnemoscope.memory.AsyncSQLAlchemyMemory`: the tables of
  :func:`mnemoscope.memory._sqlalchemy_common.make_tables` (``<prefix>_sessions``,
  ``<prefix>_messages``, ``<prefix>_marks``); a page is one ``ORDER BY seq LIMIT/OFFSET``
  on the primary key.
* :class:`~mnemoscope.memory.RedisMemory`: the keys listed in :mod:`mnemoscope.memory._redis`
  (``<prefix>:{<user>:<session>}:order|msgs|marks``); the sessions of a user are found with
  ``SCAN MATCH <prefix>:{<user>:*}:order``, a page is ``ZRANGE`` + ``HMGET``.

Every call takes the user id: there is no way to read a session by its id alone.
"""

from __future__ import annotations

import asyncio
import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory import escape_key_part, session_key_base, unescape_key_part
from mnemoscope.message import Msg

MAX_PAGE = 1_000
"""The largest page a reader returns (a request for more is cut to this)."""


@dataclass(frozen=True)
class SessionSummary:
    """One session of a user: its id and how many messages it holds."""

    session_id: str
    size: int


@dataclass
class StoredEntry:
    """One stored message with its marks and its position (0-based) in the session."""

    position: int
    msg: Msg | None
    marks: list[str] = field(default_factory=list)
    msg_id: str = ""
    error: str | None = None
    """Why the stored JSON could not be decoded (``msg`` is then ``None``)."""


@dataclass
class Page:
    entries: list[StoredEntry]
    offset: int
    limit: int
    total: int


def _decode(position: int, msg_id: str, raw: Any, marks: list[str]) -> StoredEntry:
    try:
        msg = Msg.model_validate_json(raw)
    except ValueError as exc:  # pydantic.ValidationError, invalid UTF-8
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return StoredEntry(position, None, marks, msg_id, error=first)
    return StoredEntry(position, msg, marks, msg.id)


def _bounds(offset: int, limit: int) -> tuple[int, int]:
    if offset < 0 or limit < 1:
        raise UserError(f"offset must be >= 0 and limit >= 1, got offset={offset} limit={limit}")
    return offset, min(limit, MAX_PAGE)


class SessionReaderBase(ABC):
    """Read sessions of a store, always scoped by user."""

    @abstractmethod
    async def list_sessions(self, user_id: str) -> list[SessionSummary]:
        """The user's sessions (non-empty ones), by session id."""

    @abstractmethod
    async def size(self, user_id: str, session_id: str) -> int:
        """How many messages the session holds (0 when it does not exist)."""

    @abstractmethod
    async def page(self, user_id: str, session_id: str, *, offset: int, limit: int) -> Page:
        """Messages ``offset .. offset+limit-1`` in insertion order, with their marks."""

    @abstractmethod
    async def position_of(self, user_id: str, session_id: str, msg_id: str) -> int | None:
        """The 0-based position of a message in the session, ``None`` when not stored."""

    async def all_entries(self, user_id: str, session_id: str) -> list[StoredEntry]:
        """The whole session (for views that need it, such as model calls)."""
        out: list[StoredEntry] = []
        total = await self.size(user_id, session_id)
        for offset in range(0, total, MAX_PAGE):
            out += (await self.page(user_id, session_id, offset=offset, limit=MAX_PAGE)).entries
        return out

    async def aclose(self) -> None:
        """Release what the reader created."""


# --------------------------------------------------------------------------- SQL
class SQLSessionReader(SessionReaderBase):
    """Sessions of an :class:`~mnemoscope.memory.AsyncSQLAlchemyMemory` store.

    Args:
        engine: an ``AsyncEngine`` (never disposed by the reader) or a database URL (an
            engine is built, configured as the store configures its own, and disposed by
            :meth:`aclose`).
        table_prefix: the store's ``table_prefix``.
    """

    def __init__(self, engine: Any, *, table_prefix: str = "mnemoscope") -> None:
        from mnemoscope.memory import AsyncSQLAlchemyMemory, make_tables

        if not table_prefix.isidentifier():
            raise UserError(f"table_prefix must be an identifier, got {table_prefix!r}")
        self._owns = isinstance(engine, str)
        self.engine = AsyncSQLAlchemyMemory.create_engine(engine) if self._owns else engine
        self.sessions, self.messages, self.marks = make_tables(table_prefix)

    async def _rows(self, stmt: Any) -> list[Any]:
        import sqlalchemy as sa

        try:
            async with self.engine.connect() as conn:
                return list(await conn.execute(stmt))
        except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
            if _missing_table(exc):
                return []  # the store was never written to: no sessions yet
            raise MemoryStoreError(f"cannot read the session store: {exc.orig}") from None

    async def list_sessions(self, user_id: str) -> list[SessionSummary]:
        import sqlalchemy as sa

        t = self.messages
        stmt = (
            sa.select(t.c.session_id, sa.func.count())
            .where(t.c.user_id == user_id)
            .group_by(t.c.session_id)
            .order_by(t.c.session_id)
        )
        return [SessionSummary(str(s), int(n)) for s, n in await self._rows(stmt)]

    def _where(self, table: Any, user_id: str, session_id: str) -> Any:
        return (table.c.user_id == user_id) & (table.c.session_id == session_id)

    async def size(self, user_id: str, session_id: str) -> int:
        import sqlalchemy as sa

        t = self.messages
        rows = await self._rows(
            sa.select(sa.func.count()).select_from(t).where(self._where(t, user_id, session_id))
        )
        return int(rows[0][0]) if rows else 0

    async def page(self, user_id: str, session_id: str, *, offset: int, limit: int) -> Page:
        import sqlalchemy as sa

        offset, limit = _bounds(offset, limit)
        t, k = self.messages, self.marks
        total = await self.size(user_id, session_id)
        rows = await self._rows(
            sa.select(t.c.msg_id, t.c.msg_json)
            .where(self._where(t, user_id, session_id))
            .order_by(t.c.seq)
            .limit(limit)
            .offset(offset)
        )
        marks: dict[str, list[str]] = {}
        ids = [r[0] for r in rows]
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            for msg_id, mark in await self._rows(
                sa.select(k.c.msg_id, k.c.mark).where(
                    self._where(k, user_id, session_id), k.c.msg_id.in_(chunk)
                )
            ):
                marks.setdefault(msg_id, []).append(mark)
        entries = [
            _decode(offset + i, msg_id, data, sorted(marks.get(msg_id, [])))
            for i, (msg_id, data) in enumerate(rows)
        ]
        return Page(entries, offset, limit, total)

    async def position_of(self, user_id: str, session_id: str, msg_id: str) -> int | None:
        import sqlalchemy as sa

        t = self.messages
        where = self._where(t, user_id, session_id)
        rows = await self._rows(sa.select(t.c.seq).where(where, t.c.msg_id == msg_id))
        if not rows:
            return None
        before = await self._rows(
            sa.select(sa.func.count()).select_from(t).where(where, t.c.seq < rows[0][0])
        )
        return int(before[0][0])

    async def aclose(self) -> None:
        if self._owns:
            await self.engine.dispose()


def _missing_table(exc: Any) -> bool:
    text = str(getattr(exc, "orig", exc)).lower()
    return "no such table" in text or "does not exist" in text or "doesn't exist" in text


# --------------------------------------------------------------------------- Redis
def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _text(value: Any) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


class RedisSessionReader(SessionReaderBase):
    """Sessions of a :class:`~mnemoscope.memory.RedisMemory` store.

    Args:
        client: a ``redis.asyncio.Redis`` (never closed by the reader) or a URL (a client
            is built and closed by :meth:`aclose`).
        key_prefix: the store's ``key_prefix``.
    """

    def __init__(self, client: Any, *, key_prefix: str = "mnemoscope") -> None:
        from mnemoscope._optional import require

        redis_asyncio = require(
            "redis.asyncio", extra="redis", feature="the inspector's Redis reader"
        )

        if not key_prefix or "{" in key_prefix or "}" in key_prefix:
            raise UserError(
                f"key_prefix must be non-empty without '{{' or '}}', got {key_prefix!r}"
            )
        self._owns = isinstance(client, str)
        self.client = redis_asyncio.Redis.from_url(client) if self._owns else client
        self.key_prefix = key_prefix

    def _base(self, user_id: str, session_id: str) -> str:
        return session_key_base(self.key_prefix, user_id, session_id)

    async def _cmd(self, *args: Any) -> Any:
        from redis.client import NEVER_DECODE
        from redis.exceptions import RedisError

        try:
            return await self.client.execute_command(*args, **{NEVER_DECODE: True})
        except RedisError as exc:
            raise MemoryStoreError(f"cannot read the Redis session store: {exc}") from None

    async def list_sessions(self, user_id: str) -> list[SessionSummary]:
        head = f"{self.key_prefix}:{{{escape_key_part(user_id)}:"
        pattern = _glob_escape(head) + "*}:order"
        found: set[str] = set()
        cursor: Any = b"0"
        while True:
            cursor, keys = await self._cmd("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
            for key in keys:
                text = _text(key)
                middle = text[len(head) : -len("}:order")]
                if ":" not in middle:  # an escaped session id never holds ':'
                    found.add(unescape_key_part(middle))
            if int(cursor) == 0:
                break
        ids = sorted(found)
        sizes = await asyncio.gather(*(self.size(user_id, s) for s in ids))
        return [SessionSummary(s, n) for s, n in zip(ids, sizes, strict=True) if n]

    async def size(self, user_id: str, session_id: str) -> int:
        return int(await self._cmd("ZCARD", self._base(user_id, session_id) + ":order"))

    async def page(self, user_id: str, session_id: str, *, offset: int, limit: int) -> Page:
        offset, limit = _bounds(offset, limit)
        base = self._base(user_id, session_id)
        total = await self.size(user_id, session_id)
        ids = await self._cmd("ZRANGE", base + ":order", offset, offset + limit - 1)
        if not ids:
            return Page([], offset, limit, total)
        datas = await self._cmd("HMGET", base + ":msgs", *ids)
        raw_marks = await self._cmd("HMGET", base + ":marks", *ids)
        entries: list[StoredEntry] = []
        for i, (msg_id, data, marks) in enumerate(zip(ids, datas, raw_marks, strict=True)):
            if data is None:  # deleted between the two reads
                continue
            entries.append(_decode(offset + i, _text(msg_id), data, _marks_of(marks)))
        return Page(entries, offset, limit, total)

    async def position_of(self, user_id: str, session_id: str, msg_id: str) -> int | None:
        rank = await self._cmd("ZRANK", self._base(user_id, session_id) + ":order", msg_id)
        return None if rank is None else int(rank)

    async def aclose(self) -> None:
        if self._owns:
            await self.client.aclose()


def _marks_of(raw: Any) -> list[str]:
    if raw is None:
        return []
    try:
        marks = json.loads(raw)
    except ValueError:
        return []
    return sorted(m for m in marks if isinstance(m, str)) if isinstance(marks, list) else []


# --------------------------------------------------------------------------- URLs
def session_reader_from_url(url: str, *, prefix: str = "mnemoscope") -> SessionReaderBase:
    """A reader for a store URL: ``redis://``/``rediss://``/``unix://`` or a SQLAlchemy
    asyncio URL (``sqlite+aiosqlite:///x.db``, ``postgresql+asyncpg://...``,
    ``mysql+aiomysql://...``). ``prefix`` is the store's key or table prefix.

    Raises:
        UserError: the URL names no supported store.
    """
    scheme = url.split(":", 1)[0].lower()
    if scheme in ("redis", "rediss", "unix"):
        return RedisSessionReader(url, key_prefix=prefix)
    if scheme.split("+", 1)[0] in ("sqlite", "postgresql", "postgres", "mysql", "mariadb"):
        return SQLSessionReader(url, table_prefix=prefix)
    raise UserError(
        f"--store {url!r} is not a session store URL: use redis://host:6379/0, "
        "sqlite+aiosqlite:///sessions.db or postgresql+asyncpg://user@host/db"
    )
