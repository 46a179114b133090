"""Session readers against real stores: listing per user, pages, positions, isolation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.errors import UserError
from mnemoscope.inspector import SessionReaderBase, session_reader_from_url
from mnemoscope.memory import MemoryBase
from mnemoscope.message import UserMsg

BACKENDS = ["sqlite", "redis", "postgres"]


@pytest.fixture(params=BACKENDS)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, unique_id: str
) -> AsyncIterator[tuple[str, str, Any]]:
    """``(url, prefix, make(user, session) -> MemoryBase)``, cleared afterwards."""
    backend = request.param
    prefix = f"insp{unique_id[:8]}"
    made: list[MemoryBase] = []
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    elif backend == "redis":
        url = request.getfixturevalue("redis_url")
    else:
        url = request.getfixturevalue("postgres_url")

    def make(user: str, session: str) -> MemoryBase:
        if backend == "redis":
            from mnemoscope.memory import RedisMemory

            mem: MemoryBase = RedisMemory.from_url(
                url, user_id=user, session_id=session, key_prefix=prefix
            )
        else:
            from mnemoscope.memory import AsyncSQLAlchemyMemory

            mem = AsyncSQLAlchemyMemory(url, user_id=user, session_id=session, table_prefix=prefix)
        made.append(mem)
        return mem

    yield url, prefix, make
    for mem in made:
        await mem.clear()
        await mem.aclose()
    if backend == "postgres":
        import sqlalchemy as sa

        from mnemoscope.memory import AsyncSQLAlchemyMemory

        engine = AsyncSQLAlchemyMemory.create_engine(url)
        async with engine.begin() as conn:
            for t in ("marks", "messages", "sessions"):
                await conn.execute(sa.text(f"DROP TABLE IF EXISTS {prefix}_{t}"))
        await engine.dispose()


TRICKY_USERS = ["alice", "al:ice", "a{b}c", "*", "a%3Ab", "al?ce"]


async def test_sessions_are_listed_per_user_even_with_key_syntax_in_ids(
    store: tuple[str, str, Any],
) -> None:
    url, prefix, make = store
    for user in TRICKY_USERS:
        for session in (f"{user}-s:1", "s}2{", "s*3"):
            await make(user, session).add(UserMsg(user, f"hello from {user}/{session}"))
    reader: SessionReaderBase = session_reader_from_url(url, prefix=prefix)
    try:
        for user in TRICKY_USERS:
            listed = await reader.list_sessions(user)
            assert sorted(s.session_id for s in listed) == sorted([f"{user}-s:1", "s}2{", "s*3"]), (
                user
            )
            assert all(s.size == 1 for s in listed)
            page = await reader.page(user, "s*3", offset=0, limit=10)
            assert [e.msg.get_text_content() for e in page.entries if e.msg] == [
                f"hello from {user}/s*3"
            ]
        assert await reader.list_sessions("nobody") == []
        assert (await reader.page("nobody", "s*3", offset=0, limit=10)).entries == []
    finally:
        await reader.aclose()


async def test_pages_marks_and_positions(store: tuple[str, str, Any]) -> None:
    url, prefix, make = store
    mem = make("u", "long")
    msgs = [UserMsg("u", f"m{i}") for i in range(30)]
    await mem.add(msgs[:10])
    await mem.add(msgs[10:], marks=["summary"])
    await mem.update_marks(msgs[3].id, add="pinned")
    reader = session_reader_from_url(url, prefix=prefix)
    try:
        assert await reader.size("u", "long") == 30
        page = await reader.page("u", "long", offset=8, limit=4)
        assert page.total == 30
        assert [e.position for e in page.entries] == [8, 9, 10, 11]
        assert [e.msg_id for e in page.entries] == [m.id for m in msgs[8:12]]
        assert [e.marks for e in page.entries] == [[], [], ["summary"], ["summary"]]
        first = await reader.page("u", "long", offset=0, limit=5)
        assert first.entries[3].marks == ["pinned"]
        assert await reader.position_of("u", "long", msgs[17].id) == 17
        assert await reader.position_of("other", "long", msgs[17].id) is None
        assert len(await reader.all_entries("u", "long")) == 30
        with pytest.raises(UserError):
            await reader.page("u", "long", offset=-1, limit=5)
    finally:
        await reader.aclose()


async def test_a_corrupt_stored_message_is_shown_as_such(tmp_path: Path) -> None:
    import sqlite3

    from mnemoscope.memory import AsyncSQLAlchemyMemory

    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    async with AsyncSQLAlchemyMemory(url, user_id="u", session_id="s") as mem:
        await mem.add([UserMsg("u", "fine"), UserMsg("u", "to break")])
    with sqlite3.connect(tmp_path / "c.db") as conn:
        conn.execute("UPDATE mnemoscope_messages SET msg_json = '{bad' WHERE seq = 2")
    reader = session_reader_from_url(url)
    try:
        page = await reader.page("u", "s", offset=0, limit=10)
    finally:
        await reader.aclose()
    assert page.entries[0].msg is not None
    assert page.entries[1].msg is None and page.entries[1].error


async def test_a_store_never_written_has_no_sessions(tmp_path: Path) -> None:
    reader = session_reader_from_url(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")
    try:
        assert await reader.list_sessions("alice") == []
        assert await reader.size("alice", "s") == 0
    finally:
        await reader.aclose()


def test_unknown_store_url_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="not a session store URL"):
        session_reader_from_url("http://example.invalid/")
