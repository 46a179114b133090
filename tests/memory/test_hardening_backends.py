"""Hardening of the short-term memory backends (issue 10, items 5, 13, 14, 15, 18, 28).

Each test is a reproducer of a defect found by the adversarial review: look-alike ids that
MariaDB's padding collation merged, unserialisable messages that poisoned a session, a
non-UTF-8 Redis row that broke every read of a decoding client, marks orphaned by a
``clear`` racing ``update_marks``, and unhelpful errors for URLs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from mnemoscope.errors import CorruptRecordError, MemoryStoreError, UserError, ValidationError
from mnemoscope.memory import MemoryBase
from mnemoscope.message import Msg, UserMsg

MakeMemory = Callable[..., MemoryBase]

TIMEOUT = 60  # seconds: nothing here may hang


def texts(msgs: list[Msg]) -> list[str]:
    return [m.get_text_content() for m in msgs]


# ------------------------------------------------------- item 5: look-alike ids
async def test_ids_differing_by_trailing_spaces_are_distinct(make_memory: MakeMemory) -> None:
    alice = make_memory(session_id="s")
    alice_sp = make_memory(session_id="s", user_id=alice.user_id + " ")
    other_session = make_memory(session_id="s ", user_id=alice.user_id)
    await alice.add(UserMsg("alice", "alice's secret"), marks="m")
    assert await alice_sp.get() == []
    assert await alice_sp.size() == 0
    assert await other_session.get() == []
    await alice_sp.add(UserMsg("x", "look-alike user"))
    await other_session.add(UserMsg("x", "look-alike session"))
    await alice_sp.clear()
    await other_session.clear()
    assert texts(await alice.get()) == ["alice's secret"]

    dup, dup_sp = UserMsg("a", "one", id="dup"), UserMsg("a", "two", id="dup ")
    assert await alice.add(dup, marks="m") == 1
    assert await alice.add(dup_sp, marks="m ", on_duplicate="error") == 1
    assert texts(await alice.get()) == ["alice's secret", "one", "two"]
    assert await alice.get_marks("dup") == ["m"]
    assert await alice.get_marks("dup ") == ["m "]
    assert texts(await alice.get(marks="m ")) == ["two"]
    assert texts(await alice.get(exclude_marks="m")) == ["two"]
    assert await alice.update_marks("dup ", add="only-two") == 1
    assert texts(await alice.get(marks="only-two")) == ["two"]
    assert await alice.delete("dup ") == 1
    assert texts(await alice.get()) == ["alice's secret", "one"]
    assert await alice.delete_by_mark("m ") == 0
    # the PostgreSQL/MariaDB one-statement ignore-add and the batch path too
    batch = [UserMsg("a", "b1", id="k"), UserMsg("a", "b2", id="k "), UserMsg("a", "b3", id="k  ")]
    assert await alice.add(batch) == 3
    assert await alice.add(UserMsg("a", "b4", id="k   ")) == 1
    assert texts(await alice.get(last_n=4)) == ["b1", "b2", "b3", "b4"]


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
async def test_mariadb_old_padding_schema_is_refused_then_upgraded(
    backend_url: str, unique_id: str
) -> None:
    import sqlalchemy as sa

    from mnemoscope.memory import AsyncSQLAlchemyMemory

    prefix = f"old_{unique_id}"
    engine = AsyncSQLAlchemyMemory.create_engine(backend_url)
    try:
        first = AsyncSQLAlchemyMemory(engine, user_id="alice", table_prefix=prefix)
        await first.add(UserMsg("alice", "kept"), marks="m")
        # turn the tables into the old schema (PAD SPACE collation on ids and marks)
        async with engine.begin() as conn:
            for table, cols in (
                ("sessions", ("user_id", "session_id")),
                ("messages", ("user_id", "session_id", "msg_id")),
                ("marks", ("user_id", "session_id", "msg_id", "mark")),
            ):
                mods = ", ".join(
                    f"MODIFY {c} VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
                    for c in cols
                )
                await conn.execute(sa.text(f"ALTER TABLE {prefix}_{table} {mods}"))
        old_engine = AsyncSQLAlchemyMemory.create_engine(backend_url)
        mem = AsyncSQLAlchemyMemory(old_engine, user_id="alice", table_prefix=prefix)
        with pytest.raises(UserError) as info:
            await mem.get()
        message = str(info.value)
        assert "upgrade_tables()" in message
        assert f"ALTER TABLE {prefix}_messages MODIFY user_id" in message
        assert (
            "MODIFY msg_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL"
            in message
        )
        with pytest.raises(UserError):
            await mem.add(UserMsg("alice", "refused"))
        await mem.upgrade_tables()
        assert texts(await mem.get()) == ["kept"]
        assert await mem.add(UserMsg("a", "one", id="dup")) == 1
        assert await mem.add(UserMsg("a", "two", id="dup ")) == 1
        assert texts(await mem.get()) == ["kept", "one", "two"]
        assert texts(await mem.get(marks="m")) == ["kept"]
        await mem.upgrade_tables()  # nothing left to do: no error
        await old_engine.dispose()
    finally:
        async with engine.begin() as conn:
            for table in ("marks", "messages", "sessions"):
                await conn.execute(sa.text(f"DROP TABLE IF EXISTS {prefix}_{table}"))
            procedures = await conn.execute(
                sa.text(
                    "SELECT ROUTINE_NAME FROM information_schema.ROUTINES "
                    "WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME LIKE :p"
                ),
                {"p": f"{prefix}\\_%"},
            )
            for (name,) in list(procedures):  # single adds' stored procedure
                await conn.execute(sa.text(f"DROP PROCEDURE {name}"))
        await engine.dispose()


# --------------------------------------- items 13 and 18: unserialisable messages
@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (lambda: UserMsg("alice", "name \udcff.txt"), "content[0].text"),
        (lambda: UserMsg("alice", "ok", metadata={"path": {"obj": object()}}), "metadata.path.obj"),
        (lambda: UserMsg("alice", "ok", metadata={"k\udcff": 1}), "metadata"),
    ],
    ids=["lone-surrogate", "object-in-metadata", "surrogate-key"],
)
async def test_unserialisable_message_is_refused_at_add(
    make_memory: MakeMemory, bad: Callable[[], Msg], field: str
) -> None:
    mem = make_memory()
    good = UserMsg("alice", "stored before")
    await mem.add(good, marks="m")
    msg = bad()
    for on_duplicate in ("ignore", "replace", "error"):
        with pytest.raises(ValidationError) as info:
            await mem.add([UserMsg("alice", "same batch"), msg], on_duplicate=on_duplicate)
        assert field in str(info.value)
        assert msg.id in str(info.value)
    # replacing a stored message by an unserialisable one keeps the stored one
    broken = bad().model_copy(update={"id": good.id})
    with pytest.raises(ValidationError):
        await mem.add(broken, on_duplicate="replace")
    assert texts(await mem.get()) == ["stored before"]
    state = await mem.export_state()
    assert [e.marks for e in state.messages] == [["m"]]
    assert mem.corrupt_records == []


# --------------------------------------------- item 14: Redis decode_responses
@pytest.mark.parametrize("decode", [False, True], ids=["bytes", "decode_responses"])
async def test_redis_non_utf8_row_follows_corrupt_policy(
    redis_url: str, unique_id: str, decode: bool
) -> None:
    import redis.asyncio as aioredis

    from mnemoscope.memory import RedisMemory

    client = aioredis.Redis.from_url(redis_url, decode_responses=decode)
    mem = RedisMemory(client, user_id=unique_id)
    try:
        a, b, c = (UserMsg("alice", w) for w in ("a", "b ✓", "c"))
        await mem.add([a, b, c], marks="m")
        raw = aioredis.Redis.from_url(redis_url)
        await raw.hset(mem.key("msgs"), b.id, b'{"id": "\xff\xfe not utf-8')
        await raw.aclose()
        got = await asyncio.wait_for(mem.get(), TIMEOUT)
        assert texts(got) == ["a", "c"]
        assert [e.record_id for e in mem.corrupt_records] == [b.id]
        assert texts(await mem.get(marks="m", last_n=1)) == ["c"]
        with pytest.raises(CorruptRecordError) as info:
            await mem.get(on_corrupt="raise")
        assert info.value.record_id == b.id
        with pytest.raises(CorruptRecordError):
            await mem.export_state()
        assert await mem.get_marks(b.id) == ["m"]
        assert await mem.delete(b.id) == 1
        assert texts(await mem.get()) == ["a", "c"]
        assert await client.ping()  # the caller's client still works
    finally:
        await mem.clear()
        await client.aclose()


# --------------------------------------- item 15: update_marks racing clear/delete
async def test_update_marks_racing_clear_leaves_no_orphan_marks(
    make_memory: MakeMemory, backend: str
) -> None:
    marker = make_memory()
    # the same session through its own connections (in memory: the same object)
    clearer = marker if backend == "inmemory" else make_memory()
    for round_ in range(30):
        old = UserMsg("alice", f"old {round_}")
        await clearer.add(old)
        await asyncio.wait_for(
            asyncio.gather(marker.update_marks([old.id], add="old"), clearer.clear()), TIMEOUT
        )
        new = UserMsg("alice", f"new {round_}")
        await clearer.add(new)
        assert await marker.get(marks="old") == [], f"round {round_}"
        assert await marker.get_marks(new.id) == [], f"round {round_}"
        assert texts(await marker.get(exclude_marks="old")) == [f"new {round_}"]
        await clearer.clear()


async def test_update_marks_racing_delete_leaves_no_orphan_marks(
    make_memory: MakeMemory, backend: str
) -> None:
    marker = make_memory()
    deleter = marker if backend == "inmemory" else make_memory()
    for round_ in range(30):
        msg = UserMsg("alice", f"msg {round_}")
        await deleter.add(msg)
        await asyncio.wait_for(
            asyncio.gather(marker.update_marks([msg.id], add="old"), deleter.delete(msg.id)),
            TIMEOUT,
        )
        await deleter.add(msg)  # the same id again: it must come back without the mark
        assert await marker.get_marks(msg.id) == [], f"round {round_}"
        assert await marker.get(marks="old") == [], f"round {round_}"


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)
async def test_sql_clear_keeps_the_position_counter(make_memory: MakeMemory) -> None:
    import sqlalchemy as sa

    mem: Any = make_memory()
    await mem.add([UserMsg("alice", "a"), UserMsg("alice", "b")])
    await mem.clear()
    await mem.add(UserMsg("alice", "c"))
    t = mem.messages
    async with mem.engine.connect() as conn:
        seqs = list(
            await conn.execute(
                sa.select(t.c.seq).where(t.c.user_id == mem.user_id, t.c.session_id == "s")
            )
        )
    assert [r[0] for r in seqs] == [3]


# ------------------------------------------------------- item 28: library errors
async def test_redis_memory_accepts_a_url_string(redis_url: str, unique_id: str) -> None:
    from mnemoscope.memory import RedisMemory

    mem = RedisMemory(redis_url, user_id=unique_id)
    try:
        await mem.add(UserMsg("alice", "via url"))
        assert texts(await mem.get()) == ["via url"]
    finally:
        await mem.clear()
        await mem.aclose()
    with pytest.raises(UserError, match="not both"):
        RedisMemory(redis_url, url=redis_url)
    with pytest.raises(UserError, match=r"RedisMemory\.from_url"):
        RedisMemory(42)


async def test_redis_refused_connection_says_is_it_running() -> None:
    pytest.importorskip("redis", reason="the 'redis' extra is not installed")
    from mnemoscope.memory import RedisMemory

    mem = RedisMemory.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=5)
    try:
        with pytest.raises(MemoryStoreError) as info:
            await asyncio.wait_for(mem.get(), TIMEOUT)
        assert "could not connect to Redis at 127.0.0.1:1: is it running?" in str(info.value)
        assert "connection to Redis lost" not in str(info.value)
        with pytest.raises(MemoryStoreError, match="could not connect to Redis"):
            await asyncio.wait_for(mem.add(UserMsg("a", "x"), on_duplicate="error"), TIMEOUT)
        with pytest.raises(MemoryStoreError, match="could not connect to Redis"):
            await asyncio.wait_for(mem.size(), TIMEOUT)
    finally:
        await mem.aclose()


@pytest.mark.parametrize(
    ("url", "suggestion"),
    [
        ("postgresql://bob:s3cret@db.example/app", "postgresql+asyncpg://bob:***@db.example/app"),
        ("postgresql+psycopg2://bob@db.example/app", "postgresql+asyncpg://bob@db.example/app"),
        ("postgres://bob@db.example/app", "postgresql+asyncpg://bob@db.example/app"),
        ("sqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("sqlite+pysqlite:////tmp/abs.db", "sqlite+aiosqlite:////tmp/abs.db"),
        ("mysql://root@db.example:3306/app", "mysql+aiomysql://root@db.example:3306/app"),
        ("mysql+pymysql://root@db.example/app", "mysql+aiomysql://root@db.example/app"),
        ("mariadb://root@db.example/app", "mysql+aiomysql://root@db.example/app"),
    ],
)
def test_sql_sync_driver_url_names_the_async_one(url: str, suggestion: str) -> None:
    pytest.importorskip("aiosqlite", reason="the 'sql' extra is not installed")
    from mnemoscope.memory import AsyncSQLAlchemyMemory

    for make in (AsyncSQLAlchemyMemory, AsyncSQLAlchemyMemory.create_engine):
        with pytest.raises(UserError) as info:
            make(url)
        assert not isinstance(info.value, ImportError)
        assert f"use {suggestion}" in str(info.value)
        assert "s3cret" not in str(info.value)
    with pytest.raises(UserError, match="use sqlite"):
        AsyncSQLAlchemyMemory(url="sqlite:///x.db")
