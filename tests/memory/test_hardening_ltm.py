"""Hardening of the native long-term store (issue 10, items 18 and 23).

Damaged files raise ``MemoryStoreError`` with the path and the fix and are never modified;
``read_only=True`` / ``create=False`` never create or change a file.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory import LocalLongTermMemory
from mnemoscope.testing import HashEmbeddingModel


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(directory: Path) -> dict[str, str]:
    return {p.name: digest(p) for p in sorted(directory.iterdir()) if p.is_file()}


async def make_store(path: Path, n: int = 300) -> None:
    async with LocalLongTermMemory(path) as store:
        texts = [
            f"memory number {i} of alice, with some padding text {i * 7}" * 4 for i in range(n)
        ]
        await store.record(texts, user_id="alice")
        await store.record("Bob lives in Rome.", user_id="bob")


@pytest.fixture
async def damaged(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    kind = request.param
    path = tmp_path / f"{kind}.db"
    if kind == "text":
        path.write_text("this is a text file, not SQLite\n" * 20)
        return path
    good = tmp_path / "good.db"
    await make_store(good)
    data = good.read_bytes()
    if kind == "truncated":
        path.write_bytes(data[: len(data) // 3])
    else:  # pages in the middle overwritten
        garbled = bytearray(data)
        garbled[4096 * 3 : 4096 * 6] = b"\xff" * (4096 * 3)
        path.write_bytes(bytes(garbled))
    good.unlink()
    return path


@pytest.mark.parametrize("damaged", ["text", "truncated", "garbled"], indirect=True)
@pytest.mark.parametrize("read_only", [False, True])
@pytest.mark.parametrize("operation", ["list", "retrieve", "record", "users"])
async def test_damaged_file_raises_store_error_and_is_left_unchanged(
    damaged: Path, read_only: bool, operation: str
) -> None:
    before = digest(damaged)
    # the default open (read_only not even passed) must not hand out raw sqlite3 errors
    store = LocalLongTermMemory(damaged, **({"read_only": True} if read_only else {}))
    with pytest.raises((MemoryStoreError, UserError)) as info:
        if operation == "list":
            await store.list(user_id="alice")
        elif operation == "retrieve":
            await store.retrieve("memory number 250", user_id="alice")
        elif operation == "users":
            await store.users()
        else:
            await store.record("a new memory", user_id="alice")
    await store.aclose()
    assert not isinstance(info.value, sqlite3.Error)
    message = str(info.value)
    if read_only and operation == "record":
        assert isinstance(info.value, UserError) and "read_only" in message
    else:
        assert type(info.value) is MemoryStoreError
        assert repr(str(damaged)) in message
        assert "left unchanged" in message
        assert "pass" in message or "Restore" in message  # the fix
        assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
    assert digest(damaged) == before


async def test_read_only_never_changes_a_file_or_creates_one(tmp_path: Path) -> None:
    chat = tmp_path / "chat.db"
    conn = sqlite3.connect(chat)
    conn.execute("CREATE TABLE messages (id TEXT PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO messages VALUES ('1', 'hello')")
    conn.commit()
    conn.close()
    empty = tmp_path / "empty.db"
    empty.touch()
    before = listing(tmp_path)
    for path in (chat, empty):
        for kwargs in ({"read_only": True}, {"create": False}):
            store = LocalLongTermMemory(path, **kwargs)  # type: ignore[arg-type]
            with pytest.raises(MemoryStoreError, match="no long-term store in"):
                await store.list(user_id="a")
            await store.aclose()
    missing = tmp_path / "missing.db"
    for kwargs in ({"read_only": True}, {"create": False}):
        store = LocalLongTermMemory(missing, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(MemoryStoreError, match="no long-term store at"):
            await store.users()
        await store.aclose()
    assert listing(tmp_path) == before  # byte for byte, and no -wal/-shm/journal left


async def test_read_only_reads_a_store_without_touching_it(tmp_path: Path) -> None:
    path = tmp_path / "ltm.db"
    await make_store(path, n=5)
    before = listing(tmp_path)
    assert set(before) == {"ltm.db"}  # WAL checkpointed and removed on close
    async with LocalLongTermMemory(path, read_only=True) as store:
        assert len(await store.list(user_id="alice")) == 5
        hits = await store.retrieve("where does Bob live", user_id="bob")
        assert [h.content for h in hits] == ["Bob lives in Rome."]
        assert [(u.user_id, u.active, u.total) for u in await store.users()] == [
            ("alice", 5, 5),
            ("bob", 1, 1),
        ]
        assert await store.stored_embedding() is None
    assert listing(tmp_path) == before


async def test_read_only_refuses_every_write(tmp_path: Path) -> None:
    path = tmp_path / "ltm.db"
    await make_store(path, n=2)
    before = digest(path)
    async with LocalLongTermMemory(path, read_only=True) as store:
        mem_id = (await store.list(user_id="bob"))[0].id
        for write in (
            store.record("x", user_id="bob"),
            store.update(mem_id, "changed"),
            store.delete(mem_id),
            store.erase_user("bob"),
            store.purge_expired(),
        ):
            with pytest.raises(UserError, match="read_only=True"):
                await write
    async with LocalLongTermMemory(
        path, read_only=True, embedding_model=HashEmbeddingModel()
    ) as store:
        with pytest.raises(UserError, match="read_only=True"):
            await store.reembed()
    assert digest(path) == before
    with pytest.raises(UserError, match="':memory:'"):
        LocalLongTermMemory(":memory:", read_only=True)


async def test_create_false_writes_an_existing_store_only(tmp_path: Path) -> None:
    path = tmp_path / "ltm.db"
    await make_store(path, n=1)
    async with LocalLongTermMemory(path, create=False) as store:
        assert await store.erase_user("bob") == 1
    # a database with only some of the store's tables is damage, not a new store
    partial = tmp_path / "partial.db"
    conn = sqlite3.connect(partial)
    conn.execute("CREATE TABLE ltm_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.commit()
    conn.close()
    before = digest(partial)
    store = LocalLongTermMemory(partial)
    with pytest.raises(MemoryStoreError, match="incomplete long-term store"):
        await store.list(user_id="a")
    await store.aclose()
    assert digest(partial) == before


async def test_reembed_reports_progress_and_records_the_new_model(tmp_path: Path) -> None:
    path = tmp_path / "ltm.db"
    async with LocalLongTermMemory(
        path, embedding_model=HashEmbeddingModel(32, model="hash-32")
    ) as store:
        await store.record([f"fact {i}" for i in range(5)], user_id="a")
        assert await store.stored_embedding() == ("hash-32", 32)
    seen: list[tuple[int, int]] = []
    async with LocalLongTermMemory(path, embedding_model=HashEmbeddingModel(64)) as store:
        assert await store.reembed(batch_size=2, progress=lambda d, t: seen.append((d, t))) == 5
        assert await store.stored_embedding() == ("hash-embedding", 64)
    assert seen == [(0, 5), (2, 5), (4, 5), (5, 5)]
