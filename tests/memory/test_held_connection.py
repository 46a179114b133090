"""PostgreSQL and MariaDB ignore-adds run on one driver connection held per engine between
calls (no pool checkout and check-in per add): what the pool sees, concurrency, and
disposal."""

from __future__ import annotations

import asyncio

import pytest

from mnemoscope.memory import AsyncSQLAlchemyMemory
from mnemoscope.message import UserMsg

pytestmark = pytest.mark.parametrize("url_fixture", ["postgres_url", "mariadb_url"])


async def test_single_adds_hold_one_connection_until_the_engine_is_disposed(
    request: pytest.FixtureRequest, url_fixture: str, unique_id: str
) -> None:
    engine = AsyncSQLAlchemyMemory.create_engine(request.getfixturevalue(url_fixture))
    mem = AsyncSQLAlchemyMemory(engine, user_id=unique_id, table_prefix="held")
    try:
        a, b, c = (UserMsg("alice", t) for t in "abc")
        await mem.add(a)
        await mem.add(b)
        assert engine.sync_engine.pool.checkedout() == 1  # the held one, reused
        await engine.dispose()  # terminates it; the engine goes on with a new pool
        assert engine.sync_engine.pool.checkedout() == 0
        await mem.add(c)
        assert [m.id for m in await mem.get()] == [a.id, b.id, c.id]
    finally:
        await mem.clear()
        await engine.dispose()


async def test_concurrent_adds_take_pool_connections_beside_the_held_one(
    request: pytest.FixtureRequest, url_fixture: str, unique_id: str
) -> None:
    engine = AsyncSQLAlchemyMemory.create_engine(request.getfixturevalue(url_fixture))
    mems = [
        AsyncSQLAlchemyMemory(engine, user_id=unique_id, session_id=f"s{i}", table_prefix="held")
        for i in range(6)
    ]
    try:
        msgs = [[UserMsg("alice", f"{i}-{n}") for n in range(5)] for i in range(6)]
        for n in range(5):  # six sessions written at once, five rounds
            added = await asyncio.gather(*(m.add(ms[n]) for m, ms in zip(mems, msgs, strict=True)))
            assert added == [1] * 6
        for m, ms in zip(mems, msgs, strict=True):
            assert [x.id for x in await m.get()] == [x.id for x in ms]
        assert engine.sync_engine.pool.checkedout() == 1
    finally:
        for m in mems:
            await m.clear()
        await engine.dispose()


async def test_a_pool_that_cannot_spare_a_connection_holds_none(
    request: pytest.FixtureRequest, url_fixture: str, unique_id: str
) -> None:
    engine = AsyncSQLAlchemyMemory.create_engine(
        request.getfixturevalue(url_fixture), pool_size=1, max_overflow=0, pool_timeout=5
    )
    mem = AsyncSQLAlchemyMemory(engine, user_id=unique_id, table_prefix="held")
    try:
        await mem.add(UserMsg("alice", "a"))
        assert engine.sync_engine.pool.checkedout() == 0
        async with engine.connect():  # the one connection is free for everything else
            pass
    finally:
        await mem.clear()
        await engine.dispose()
