"""Connections killed by the server mid-sequence: operations recover, batches stay whole.

Redis ``CLIENT KILL``, PostgreSQL ``pg_terminate_backend`` and MariaDB ``KILL CONNECTION``
run against the same two scenarios.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mnemoscope.errors import MemoryStoreError
from mnemoscope.memory import MemoryBase
from mnemoscope.message import Msg, UserMsg

Killer = Callable[[], Awaitable[int]]


async def _sequence_survives_kills(mem: MemoryBase, kill: Killer) -> None:
    """Between every two operations the server drops our connections."""
    added: list[Msg] = []
    for i in range(6):
        assert await kill() >= (1 if i else 0)
        pair = [UserMsg("bot", f"{i}:use"), UserMsg("bot", f"{i}:result")]
        assert await mem.add(pair, marks="pair") == 2
        added += pair
        await kill()
        assert [m.id for m in await mem.get()] == [m.id for m in added]
        await kill()
        assert await mem.size() == len(added)
        await kill()
        assert await mem.get_marks(pair[0].id) == ["pair"]
    await kill()
    assert await mem.update_marks(None, add="seen") == len(added)
    await kill()
    assert await mem.delete(added[0].id) == 1
    await kill()
    assert await mem.add(UserMsg("bot", "strict"), on_duplicate="error") == 1
    assert [m.get_text_content() for m in await mem.get(marks="seen")][:2] == [
        "0:result",
        "1:use",
    ]


async def _in_flight_kills_never_split_a_batch(mem: MemoryBase, kill: Killer) -> None:
    """A killer task drops connections while pairs are being written."""
    ok: list[int] = []
    failed: list[int] = []

    async def writer() -> None:
        for i in range(60):
            pair = [UserMsg("bot", f"{i}:use"), UserMsg("bot", f"{i}:result")]
            try:
                await mem.add(pair)
                ok.append(i)
            except MemoryStoreError:  # both attempts hit a kill: allowed, must be whole
                failed.append(i)

    async def killer() -> None:
        for _ in range(25):
            await asyncio.sleep(0.004)
            await kill()

    await asyncio.gather(writer(), killer())
    got = [m.get_text_content() for m in await mem.get()]
    assert len(got) == len(set(got))  # nothing duplicated
    for i in range(60):
        use, result = f"{i}:use", f"{i}:result"
        assert (use in got) == (result in got)  # never a use without its result
        if use in got:
            assert got[got.index(use) + 1] == result
    assert all(f"{i}:use" in got for i in ok)  # nothing acknowledged is lost
    assert len(ok) >= 30  # one retry absorbs almost every kill


# ------------------------------------------------------------------------- Redis
@pytest.fixture
async def redis_pair(redis_url: str, unique_id: str) -> Any:
    import redis.asyncio as aioredis

    from mnemoscope.memory import RedisMemory

    name = f"mnemoscope-fault-{unique_id}"
    mem = RedisMemory.from_url(redis_url, user_id=unique_id, client_name=name)
    admin = aioredis.Redis.from_url(redis_url)

    async def kill() -> int:
        ids = [c["id"] for c in await admin.client_list() if c["name"] == name]
        for cid in ids:
            await admin.client_kill_filter(_id=cid)
        return len(ids)

    yield mem, kill
    await mem.clear()
    await mem.aclose()
    await admin.aclose()


@pytest.mark.services
async def test_redis_client_kill_between_operations(redis_pair: Any) -> None:
    await _sequence_survives_kills(*redis_pair)


@pytest.mark.services
async def test_redis_client_kill_in_flight(redis_pair: Any) -> None:
    await _in_flight_kills_never_split_a_batch(*redis_pair)


@pytest.mark.services
async def test_redis_unsafe_add_reports_unknown_outcome(redis_url: str, unique_id: str) -> None:
    """A reply lost after the script was sent: ``on_duplicate="error"`` must not retry."""
    import redis.asyncio as aioredis

    from mnemoscope.memory import RedisMemory

    mem = RedisMemory.from_url(redis_url, user_id=unique_id, socket_timeout=0.2)
    admin = aioredis.Redis.from_url(redis_url)
    await mem.size()

    async def hog() -> Any:  # keep the server busy for 0.6 s: our reply times out after the send
        return await admin.eval(
            "local t = redis.call('TIME'); local s = t[1] * 1e6 + t[2]; "
            "repeat local n = redis.call('TIME') until n[1] * 1e6 + n[2] > s + 600000 "
            "return 1",
            0,
        )

    busy = asyncio.create_task(hog())
    await asyncio.sleep(0.05)
    pair = [UserMsg("bot", "use"), UserMsg("bot", "result")]
    with pytest.raises(MemoryStoreError, match="entirely or not at all"):
        await mem.add(pair, on_duplicate="error")
    await busy
    got = [m.get_text_content() for m in await mem.get()]
    assert got in ([], ["use", "result"])  # whole or absent, never half
    await mem.clear()
    await mem.aclose()
    await admin.aclose()


# -------------------------------------------------------------------- PostgreSQL
@pytest.fixture
async def postgres_pair(postgres_url: str, unique_id: str) -> Any:
    import sqlalchemy as sa

    from mnemoscope.memory import AsyncSQLAlchemyMemory

    name = f"mnemoscope-fault-{unique_id}"
    engine = AsyncSQLAlchemyMemory.create_engine(
        postgres_url, connect_args={"server_settings": {"application_name": name}}
    )
    mem = AsyncSQLAlchemyMemory(engine, user_id=unique_id)
    admin = AsyncSQLAlchemyMemory.create_engine(postgres_url)

    async def kill() -> int:
        async with admin.connect() as conn:
            rows = await conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :name"
                ),
                {"name": name},
            )
            return len(rows.all())

    yield mem, kill
    await mem.clear()
    await engine.dispose()
    await admin.dispose()


@pytest.mark.services
async def test_postgres_terminate_backend_between_operations(postgres_pair: Any) -> None:
    await _sequence_survives_kills(*postgres_pair)


@pytest.mark.services
async def test_postgres_terminate_backend_in_flight(postgres_pair: Any) -> None:
    await _in_flight_kills_never_split_a_batch(*postgres_pair)


# ----------------------------------------------------------------------- MariaDB
@pytest.fixture
async def mariadb_pair(mariadb_url: str, unique_id: str) -> Any:
    import sqlalchemy as sa

    from mnemoscope.memory import AsyncSQLAlchemyMemory

    engine = AsyncSQLAlchemyMemory.create_engine(mariadb_url)
    mem = AsyncSQLAlchemyMemory(engine, user_id=unique_id)
    admin = AsyncSQLAlchemyMemory.create_engine(mariadb_url)
    thread_ids: set[int] = set()  # server thread id of every connection the engine opened

    @sa.event.listens_for(engine.sync_engine, "connect")
    def remember(dbapi_conn: Any, _record: Any) -> None:
        thread_ids.add(dbapi_conn.driver_connection.server_thread_id[0])

    async def kill() -> int:
        killed = 0
        async with admin.connect() as conn:
            for tid in sorted(thread_ids):
                thread_ids.discard(tid)
                try:
                    await conn.exec_driver_sql(f"KILL CONNECTION {int(tid)}")
                    killed += 1
                except sa.exc.DBAPIError:  # already closed by the engine
                    pass
        return killed

    yield mem, kill
    await mem.clear()
    await engine.dispose()
    await admin.dispose()


@pytest.mark.services
async def test_mariadb_kill_connection_between_operations(mariadb_pair: Any) -> None:
    await _sequence_survives_kills(*mariadb_pair)


@pytest.mark.services
async def test_mariadb_kill_connection_in_flight(mariadb_pair: Any) -> None:
    await _in_flight_kills_never_split_a_batch(*mariadb_pair)
