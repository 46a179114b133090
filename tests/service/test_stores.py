"""The service stores (in-process, SQLite, Redis, PostgreSQL) honour one contract: per-user
sessions, a fenced expiring lock, idempotent appends, recovery of lost replies."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.errors import UserError
from mnemoscope.service import InMemoryServiceStore, StoredEvent, store_from_url
from mnemoscope.service._store import Acquired, Busy, NoSession, ServiceStoreBase

from .conftest import drop_store_data

FAILED = json.dumps({"type": "reply_failed", "reason": "worker_lost"})


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def store_factory(request: Any, unique_id: str, tmp_path: Path) -> AsyncIterator[Any]:
    """``await make()`` -> an open store; several share one server (and key space)."""
    made: list[ServiceStoreBase] = []

    async def make() -> ServiceStoreBase:
        if request.param == "memory":
            if made:
                return made[0]
            store: ServiceStoreBase = InMemoryServiceStore()
        elif request.param == "sqlite":  # each store its own connection to one file
            store = store_from_url(f"sqlite:///{tmp_path / 'service.db'}")
        elif request.param == "redis":
            from mnemoscope.service import RedisServiceStore

            url = request.getfixturevalue("redis_url")
            store = RedisServiceStore(url, key_prefix=f"svc{unique_id}")
        else:
            from mnemoscope.service import PostgresServiceStore

            url = request.getfixturevalue("postgres_url")
            store = PostgresServiceStore(url, table_prefix=f"svc{unique_id}")
        await store.open()
        made.append(store)
        return store

    yield make
    for store in made:
        await drop_store_data(store)
        await store.aclose()


def ev(seq: int, kind: str = "text_delta") -> StoredEvent:
    return StoredEvent(seq, kind, json.dumps({"type": kind, "n": seq}))


async def test_sessions_are_per_user(store_factory: Any) -> None:
    store = await store_factory()
    assert await store.create_session("alice", "s1", "A") is not None
    assert await store.create_session("alice", "s1", "again") is None
    assert await store.create_session("bob", "s1", "B") is not None  # same id, other user
    assert [s.title for s in await store.list_sessions("alice")] == ["A"]
    assert [s.title for s in await store.list_sessions("bob")] == ["B"]
    assert await store.get_session("carol", "s1") is None
    assert isinstance(await store.acquire("carol", "s1", 5, FAILED), NoSession)


async def test_lock_is_exclusive_and_fenced_after_expiry(store_factory: Any) -> None:
    store, other = await store_factory(), await store_factory()
    await store.create_session("alice", "s", "")
    first = await store.acquire("alice", "s", 0.3, FAILED)
    assert isinstance(first, Acquired)
    assert await store.start_reply("alice", "s", "r1", first.token)
    assert isinstance(await other.acquire("alice", "s", 5, FAILED), Busy)
    assert not (await store.append("alice", "s", "r1", first.token, [ev(1)])).fenced
    await asyncio.sleep(0.5)  # the holder "stalls" past its lock's expiry
    second = await other.acquire("alice", "s", 5, FAILED)
    assert isinstance(second, Acquired) and second.token > first.token
    assert second.recovered_reply == "r1"  # closed as failed while acquiring
    # the stale holder is fenced out: no write lands, the heartbeat says so
    assert (await store.append("alice", "s", "r1", first.token, [ev(2)])).fenced
    assert (await store.heartbeat("alice", "s", first.token, 5, "r1")).fenced
    events = await other.read_events("alice", "s", "r1", 0, wait=0)
    assert [(e.seq, e.type) for e in events] == [(1, "text_delta"), (2, "reply_failed")]
    info = await other.get_reply("alice", "s", "r1")
    assert info is not None and info.status == "failed" and info.last_seq == 2
    await store.release("alice", "s", first.token)  # a stale release frees nothing
    assert await other.lock_token("alice", "s") == second.token


async def test_append_is_atomic_ordered_and_idempotent(store_factory: Any) -> None:
    store = await store_factory()
    await store.create_session("alice", "s", "")
    got = await store.acquire("alice", "s", 5, FAILED)
    assert isinstance(got, Acquired)
    await store.start_reply("alice", "s", "r", got.token)
    batch = [ev(1), ev(2), ev(3)]
    assert not (await store.append("alice", "s", "r", got.token, batch)).fenced
    # repeated after a "dropped connection": kept once
    assert not (await store.append("alice", "s", "r", got.token, batch)).fenced
    # a gap is refused
    assert (await store.append("alice", "s", "r", got.token, [ev(5)])).fenced
    end = StoredEvent(4, "reply_end", "{}")
    assert not (await store.append("alice", "s", "r", got.token, [end], "done")).fenced
    events = await store.read_events("alice", "s", "r", 0, wait=0)
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert [e.seq for e in await store.read_events("alice", "s", "r", 2, wait=0)] == [3, 4]
    info = await store.get_reply("alice", "s", "r")
    assert info is not None and info.status == "done"
    # storing the end freed the session in the same step
    assert await store.lock_token("alice", "s") is None
    # a finished reply takes no more events, and a new acquisition recovers nothing
    assert (await store.append("alice", "s", "r", got.token, [ev(5)])).fenced
    await store.release("alice", "s", got.token)
    again = await store.acquire("alice", "s", 5, FAILED)
    assert isinstance(again, Acquired) and again.recovered_reply is None
    # another user's view of the same ids is empty
    assert await store.read_events("bob", "s", "r", 0, wait=0) == []
    assert await store.get_reply("bob", "s", "r") is None


async def test_cancel_request_reaches_the_holder(store_factory: Any) -> None:
    store, other = await store_factory(), await store_factory()
    await store.create_session("alice", "s", "")
    got = await store.acquire("alice", "s", 5, FAILED)
    assert isinstance(got, Acquired)
    await store.start_reply("alice", "s", "r", got.token)
    assert not (await store.heartbeat("alice", "s", got.token, 5, "r")).cancel_requested
    assert await other.request_cancel("bob", "s", "r") is None  # not bob's
    info = await other.request_cancel("alice", "s", "r")
    assert info is not None and info.cancel_requested
    assert (await store.heartbeat("alice", "s", got.token, 5, "r")).cancel_requested
    assert (await store.append("alice", "s", "r", got.token, [ev(1)])).cancel_requested


async def test_blocked_reader_wakes_on_append_from_another_client(store_factory: Any) -> None:
    writer, reader = await store_factory(), await store_factory()
    await writer.create_session("alice", "s", "")
    got = await writer.acquire("alice", "s", 5, FAILED)
    assert isinstance(got, Acquired)
    await writer.start_reply("alice", "s", "r", got.token)
    read = asyncio.create_task(reader.read_events("alice", "s", "r", 0, wait=10))
    await asyncio.sleep(0.2)
    assert not read.done()
    await writer.append("alice", "s", "r", got.token, [ev(1)])
    events = await asyncio.wait_for(read, 5)
    assert [e.seq for e in events] == [1]


async def test_delete_needs_the_lock_and_removes_everything(store_factory: Any) -> None:
    store = await store_factory()
    await store.create_session("alice", "s", "")
    got = await store.acquire("alice", "s", 5, FAILED)
    assert isinstance(got, Acquired)
    await store.start_reply("alice", "s", "r", got.token)
    await store.append("alice", "s", "r", got.token, [ev(1)], "done")
    assert not await store.delete_session("alice", "s", got.token)  # freed by the end
    got = await store.acquire("alice", "s", 5, FAILED)
    assert isinstance(got, Acquired)
    assert not await store.delete_session("alice", "s", got.token + 1)
    assert await store.delete_session("alice", "s", got.token)
    assert await store.get_session("alice", "s") is None
    assert await store.list_sessions("alice") == []
    assert await store.get_reply("alice", "s", "r") is None
    assert await store.read_events("alice", "s", "r", 0, wait=0) == []
    # recreated: starts empty, and tokens keep growing
    await store.create_session("alice", "s", "")
    again = await store.acquire("alice", "s", 5, FAILED)
    assert isinstance(again, Acquired)
    assert await store.list_replies("alice", "s") == []


async def test_list_replies_reads_every_reply_as_get_reply_does(store_factory: Any) -> None:
    store = await store_factory()
    await store.create_session("alice", "s", "")
    for n in range(1, 26):
        got = await store.acquire("alice", "s", 5, FAILED, f"r{n:02}")
        assert isinstance(got, Acquired)
        events = [ev(seq) for seq in range(1, n % 4 + 2)]
        await store.append("alice", "s", f"r{n:02}", got.token, events, "done")
    got = await store.acquire("alice", "s", 5, FAILED, "r26")  # still running, then cancelled
    assert isinstance(got, Acquired)
    await store.request_cancel("alice", "s", "r26")
    listed = await store.list_replies("alice", "s")
    assert [r.reply_id for r in listed] == [f"r{n:02}" for n in range(1, 27)]  # oldest first
    assert listed == [await store.get_reply("alice", "s", r.reply_id) for r in listed]
    assert [r.last_seq for r in listed[:4]] == [2, 3, 4, 1]
    assert listed[-1].status == "running" and listed[-1].cancel_requested
    assert await store.list_replies("alice", "nothing") == []


async def test_list_sessions_reads_every_session_as_get_session_does(store_factory: Any) -> None:
    store = await store_factory()
    for n in range(1, 31):
        await store.create_session("alice", f"s{n:02}", f"title {n}")
    await store.create_session("bob", "s01", "not alice's")
    got = await store.acquire("alice", "s05", 5, FAILED)
    assert isinstance(got, Acquired)
    assert await store.delete_session("alice", "s05", got.token)
    listed = await store.list_sessions("alice")
    assert [s.session_id for s in listed] == [f"s{n:02}" for n in range(1, 31) if n != 5]
    assert listed == [await store.get_session("alice", s.session_id) for s in listed]
    assert listed[0].title == "title 1"
    assert await store.list_sessions("carol") == []


def test_store_urls_are_shown_without_secrets() -> None:
    pytest.importorskip("redis", reason="the 'redis' extra is not installed")
    pytest.importorskip("asyncpg", reason="the 'sql' extra is not installed")
    from mnemoscope.service import PostgresServiceStore, RedisServiceStore

    redis_store = RedisServiceStore("redis://app:hunter2@cache:6379/0")
    assert redis_store.url_safe == "redis://app:***@cache:6379/0"
    assert RedisServiceStore("rediss://:hunter2@cache/0").url_safe == "rediss://***@cache/0"
    pg = PostgresServiceStore("postgres://app:hunter2@db/svc")
    assert pg.url_safe == "postgresql://app:***@db/svc"
    in_query = PostgresServiceStore("postgresql://db/svc?user=app&password=hunter2")
    assert in_query.url_safe == "postgresql://db/svc?user=app&password=***"


async def test_sqlite_store_names_a_file_it_cannot_open(tmp_path: Path) -> None:
    from mnemoscope.errors import ServiceStoreError
    from mnemoscope.service import SQLiteServiceStore

    with pytest.raises(UserError, match=re.escape("needs a file, e.g. sqlite:///service.db")):
        SQLiteServiceStore("sqlite:///:memory:")
    missing = tmp_path / "no-such-dir" / "service.db"
    store = store_from_url(f"sqlite:///{missing}")
    with pytest.raises(
        ServiceStoreError, match=re.escape(f"SQLite at sqlite:///{missing} failed to open")
    ):
        await store.open()
    missing.parent.mkdir()
    assert await store.create_session("alice", "s", "") is not None  # opens on first use
    await store.aclose()


def test_store_url_is_checked() -> None:
    assert isinstance(store_from_url("memory://"), InMemoryServiceStore)
    with pytest.raises(UserError, match="redis://host:6379/0 or postgresql://"):
        store_from_url("mysql://root@localhost/test")


async def test_acquire_can_start_the_reply_in_the_same_step(store_factory: Any) -> None:
    store = await store_factory()
    await store.create_session("alice", "s", "")
    got = await store.acquire("alice", "s", 5, FAILED, "r1")
    assert isinstance(got, Acquired)
    info = await store.get_reply("alice", "s", "r1")
    assert info is not None and info.status == "running" and info.last_seq == 0
    busy = await store.acquire("alice", "s", 5, FAILED, "r2")
    assert isinstance(busy, Busy) and busy.running_reply == "r1"
    assert await store.get_reply("alice", "s", "r2") is None  # not started when busy
    assert not (await store.append("alice", "s", "r1", got.token, [ev(1)])).fenced


async def test_bad_lock_and_append_arguments_are_refused_by_every_store(
    store_factory: Any,
) -> None:
    store = await store_factory()
    await store.create_session("alice", "s", "")
    with pytest.raises(ValueError, match="ttl must be a positive number"):
        await store.acquire("alice", "s", 0, FAILED)
    got = await store.acquire("alice", "s", 5, FAILED, "r")
    assert isinstance(got, Acquired)
    with pytest.raises(ValueError, match="ttl must be a positive number"):
        await store.heartbeat("alice", "s", got.token, -1, "r")
    with pytest.raises(ValueError, match=r"consecutive seq numbers, got \[1, 3\]"):
        await store.append("alice", "s", "r", got.token, [ev(1), ev(3)])
    with pytest.raises(ValueError, match=r"consecutive seq numbers, got \[\]"):
        await store.append("alice", "s", "r", got.token, [])
    assert await store.read_events("alice", "s", "r", 0, wait=0) == []  # nothing was written


async def test_redis_delete_leaves_no_key_forever(redis_url: str, unique_id: str) -> None:
    from mnemoscope.service import RedisServiceStore

    store = RedisServiceStore(redis_url, key_prefix=f"svc{unique_id}")
    try:
        await store.create_session("alice", "s", "")
        got = await store.acquire("alice", "s", 5, FAILED, "r")
        assert isinstance(got, Acquired)
        await store.append("alice", "s", "r", got.token, [ev(1)], "done")
        again = await store.acquire("alice", "s", 5, FAILED)
        assert isinstance(again, Acquired)
        assert await store.delete_session("alice", "s", again.token)
        keys = [k async for k in store.client.scan_iter(match=f"svc{unique_id}:*")]
        assert keys == [f"svc{unique_id}:{{alice:s}}:fence"]
        assert 0 < await store.client.ttl(keys[0]) <= 86400
    finally:
        await drop_store_data(store)
        await store.aclose()
