"""Memories of one table prefix share their SQLAlchemy tables; other prefixes get their own."""

from __future__ import annotations

import pytest

pytest.importorskip("sqlalchemy", reason="needs the 'sql' extra: pip install 'mnemoscope[sql]'")

from sqlalchemy.ext.asyncio import create_async_engine

from mnemoscope.memory import AsyncSQLAlchemyMemory, make_tables


async def test_memories_of_one_prefix_share_tables_and_other_prefixes_do_not(tmp_path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}")
    try:
        a = AsyncSQLAlchemyMemory(engine, user_id="u", session_id="a")
        b = AsyncSQLAlchemyMemory(engine, user_id="u", session_id="b")
        other = AsyncSQLAlchemyMemory(engine, user_id="u", session_id="a", table_prefix="other")
        assert a.messages is b.messages
        assert other.messages is not a.messages
        assert other.messages.name == "other_messages"
        # the public builder still hands out fresh tables a caller may change
        assert make_tables("mnemoscope")[1] is not a.messages
        # sharing does not mix sessions
        from mnemoscope.message import Msg

        await a.add(Msg(name="user", role="user", content="in a"))
        assert [m.get_text_content() for m in await b.get()] == []
        assert [m.get_text_content() for m in await a.get()] == ["in a"]
    finally:
        await engine.dispose()
