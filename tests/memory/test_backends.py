"""Backend-specific behaviour: storage layout, corrupt rows, ownership, configuration errors,
missing extras."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.errors import CorruptRecordError, MemoryStoreError, MissingExtraError, UserError
from mnemoscope.memory import MemoryBase
from mnemoscope.message import UserMsg

MakeMemory = Callable[..., MemoryBase]


# ------------------------------------------------------------------ corrupt rows
async def _corrupt(backend: str, mem: MemoryBase, msg_id: str, payload: str) -> None:
    """Write ``payload`` over a stored message, as a foreign writer would."""
    if backend == "redis":
        await mem.client.hset(mem.key("msgs"), msg_id, payload)  # type: ignore[attr-defined]
        return
    import sqlalchemy as sa

    t = mem.messages  # type: ignore[attr-defined]
    async with mem.engine.begin() as conn:  # type: ignore[attr-defined]
        await conn.execute(
            sa.update(t)
            .where(t.c.user_id == mem.user_id, t.c.session_id == mem.session_id)
            .where(t.c.msg_id == msg_id)
            .values(msg_json=payload)
        )


@pytest.mark.parametrize("backend", ["redis", "sqlite", "postgres", "mariadb"], indirect=True)
async def test_corrupt_rows_are_skipped_and_reported_by_id(
    make_memory: MakeMemory, backend: str
) -> None:
    mem = make_memory()
    a, b, c, d = (UserMsg("alice", w) for w in "abcd")
    await mem.add([a, b], marks="hint")
    await mem.add([c, d])
    await _corrupt(backend, mem, b.id, "{not json")
    await _corrupt(backend, mem, d.id, '{"valid": "json", "but": "no Msg"}')

    got = await mem.get()
    assert [m.get_text_content() for m in got] == ["a", "c"]
    assert [e.record_id for e in mem.corrupt_records] == [b.id, d.id]
    assert [m.id for m in await mem.get(marks="hint")] == [a.id]
    with pytest.raises(CorruptRecordError) as info:
        await mem.get(on_corrupt="raise")
    assert info.value.record_id == b.id
    with pytest.raises(CorruptRecordError):
        await mem.export_state()
    # the corrupt row can be inspected and deleted by its id
    assert await mem.get_marks(b.id) == ["hint"]
    assert await mem.delete([b.id, d.id]) == 2
    assert [m.id for m in await mem.get()] == [a.id, c.id]


@pytest.mark.parametrize("backend", ["redis", "sqlite", "postgres", "mariadb"], indirect=True)
async def test_rows_valid_only_when_joined_are_reported_not_merged(
    make_memory: MakeMemory, backend: str
) -> None:
    """``get`` validates every stored document in one call, as one joined JSON array (on
    MariaDB joined by the server): rows that are not one document each (a message split
    over two rows, two messages in one row) form valid JSON together, and must still be
    reported row by row, not read as the messages they happen to form."""
    mem = make_memory()
    a, b, c, d = (UserMsg("alice", w) for w in ("hello world", "b", "c", "d"))
    await mem.add([a, b, c])
    doc_a = a.model_dump_json()
    cut = doc_a.index("hello world") + len("hello")
    await _corrupt(backend, mem, a.id, doc_a[:cut])  # joined: "hello, world"
    await _corrupt(backend, mem, b.id, doc_a[cut:])
    await _corrupt(backend, mem, c.id, c.model_dump_json() + "," + d.model_dump_json())

    assert await mem.get() == []
    assert [e.record_id for e in mem.corrupt_records] == [a.id, b.id, c.id]


# ------------------------------------------------------------------------- Redis
async def test_redis_key_layout_is_one_cluster_slot(redis_url: str, unique_id: str) -> None:
    from redis.crc import key_slot

    from mnemoscope.memory import RedisMemory

    mem = RedisMemory.from_url(redis_url, user_id=f"u:{unique_id}", session_id="s{1}")
    try:
        await mem.add(UserMsg("alice", "x"), marks=["hint", "a:b"])
        keys = sorted(k.decode() for k in await mem.client.keys(f"mnemoscope:{{u%3A{unique_id}*"))
        base = f"mnemoscope:{{u%3A{unique_id}:s%7B1%7D}}"
        assert keys == sorted(
            f"{base}:{name}"
            for name in ("msgs", "order", "seq", "marks", "marknames", "mark:hint", "mark:a:b")
        )
        assert len({key_slot(k.encode()) for k in keys}) == 1
        assert mem.key("mark:hint") == f"{base}:mark:hint"
        with pytest.raises(UserError):
            mem.key("nope")
    finally:
        await mem.clear()
        await mem.aclose()


async def test_redis_ttl_is_set_and_refreshed_on_write(redis_url: str, unique_id: str) -> None:
    from mnemoscope.memory import RedisMemory

    mem = RedisMemory.from_url(redis_url, user_id=unique_id, ttl=100)
    try:
        await mem.add(UserMsg("alice", "x"), marks="hint")
        for name in ("msgs", "order", "seq", "marks", "marknames", "mark:hint"):
            assert 0 < await mem.client.ttl(mem.key(name)) <= 100
        await mem.client.expire(mem.key("msgs"), 5)
        await mem.update_marks(None, add="other")
        assert await mem.client.ttl(mem.key("msgs")) > 5
        assert 0 < await mem.client.ttl(mem.key("mark:other")) <= 100
    finally:
        await mem.clear()
        await mem.aclose()
    no_ttl = RedisMemory.from_url(redis_url, user_id=unique_id)
    try:
        await no_ttl.add(UserMsg("alice", "y"))
        assert await no_ttl.client.ttl(no_ttl.key("msgs")) == -1
    finally:
        await no_ttl.clear()
        await no_ttl.aclose()


async def test_redis_closes_only_its_own_client(redis_url: str, unique_id: str) -> None:
    import redis.asyncio as aioredis

    from mnemoscope.memory import RedisMemory

    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    mem = RedisMemory(client, user_id=unique_id)
    await mem.add([UserMsg("alice", "héllo ✓ 🙂"), UserMsg("alice", "x")], marks="m")
    # decoded responses work, multi-byte text included (the read reply is length-prefixed)
    assert [m.get_text_content() for m in await mem.get()] == ["héllo ✓ 🙂", "x"]
    assert [m.get_text_content() for m in await mem.get(last_n=1)] == ["x"]
    assert await mem.get_marks((await mem.get())[0].id) == ["m"]
    await mem.clear()
    await mem.aclose()
    assert await client.ping()  # still usable
    await client.aclose()

    name = f"mnemoscope-owned-{unique_id}"
    owned = RedisMemory(url=redis_url, user_id=unique_id, client_name=name)
    admin = aioredis.Redis.from_url(redis_url)
    await owned.size()
    assert any(c["name"] == name for c in await admin.client_list())
    await owned.aclose()
    assert not any(c["name"] == name for c in await admin.client_list())  # disconnected
    await admin.aclose()


def test_redis_configuration_errors(redis_url: str) -> None:
    import redis.asyncio as aioredis

    from mnemoscope.memory import RedisMemory

    client = aioredis.Redis.from_url(redis_url)
    with pytest.raises(UserError, match="not both"):
        RedisMemory(client, url=redis_url)
    with pytest.raises(UserError, match="key_prefix"):
        RedisMemory(url=redis_url, key_prefix="a{b}")
    with pytest.raises(UserError, match="ttl"):
        RedisMemory(url=redis_url, ttl=0)
    with pytest.raises(UserError, match="session_id"):
        RedisMemory(url=redis_url, session_id="")
    tls = RedisMemory.from_url("rediss://:secret@cache.example:6380/2", session_id="s")
    pool = tls.client.connection_pool
    assert pool.connection_class.__name__ == "SSLConnection"
    assert pool.connection_kwargs["port"] == 6380 and pool.connection_kwargs["db"] == 2


# --------------------------------------------------------------------------- SQL
@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)
async def test_sql_tables_and_indexes(make_memory: MakeMemory, backend: str) -> None:
    import sqlalchemy as sa

    mem = make_memory()
    await mem.add(UserMsg("alice", "x"), marks="hint")
    engine = mem.engine  # type: ignore[attr-defined]

    def inspect(sync_conn: sa.Connection) -> dict[str, object]:
        insp = sa.inspect(sync_conn)
        return {
            "tables": set(insp.get_table_names()),
            "msg_pk": insp.get_pk_constraint("mnemoscope_messages")["constrained_columns"],
            "mark_ix": [ix["column_names"] for ix in insp.get_indexes("mnemoscope_marks")],
        }

    async with engine.connect() as conn:
        info = await conn.run_sync(inspect)
    assert {"mnemoscope_sessions", "mnemoscope_messages", "mnemoscope_marks"} <= info["tables"]
    assert info["msg_pk"] == ["user_id", "session_id", "seq"]
    assert ["user_id", "session_id", "mark", "seq"] in info["mark_ix"]


async def test_sqlite_file_uses_wal(tmp_path: Path, unique_id: str) -> None:
    pytest.importorskip("aiosqlite", reason="the 'sql' extra is not installed")
    from mnemoscope.memory import AsyncSQLAlchemyMemory

    mem = AsyncSQLAlchemyMemory(url=f"sqlite+aiosqlite:///{tmp_path / 'm.db'}", user_id=unique_id)
    await mem.add(UserMsg("alice", "x"))
    async with mem.engine.connect() as conn:
        assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
        busy_timeout = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
        assert busy_timeout is not None and busy_timeout >= 1000
    await mem.aclose()


async def test_sql_accepts_engine_sessionmaker_session_and_closes_only_its_own(
    tmp_path: Path, unique_id: str
) -> None:
    pytest.importorskip("aiosqlite", reason="the 'sql' extra is not installed")
    from sqlalchemy.ext.asyncio import async_sessionmaker

    from mnemoscope.memory import AsyncSQLAlchemyMemory

    url = f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    engine = AsyncSQLAlchemyMemory.create_engine(url)
    factory = async_sessionmaker(engine)
    one = AsyncSQLAlchemyMemory(engine, user_id=unique_id, session_id="a")
    two = AsyncSQLAlchemyMemory(factory, user_id=unique_id, session_id="b")
    async with factory() as session:
        three = AsyncSQLAlchemyMemory(session, user_id=unique_id, session_id="c")
    for mem in (one, two, three):
        assert mem.engine is engine
        await mem.add(UserMsg("alice", mem.session_id))
        await mem.aclose()
    four = AsyncSQLAlchemyMemory(engine, user_id=unique_id, session_id="a")
    assert [m.get_text_content() for m in await four.get()] == ["a"]  # engine still open
    await engine.dispose()


async def _duplicates_marks_and_order(mem: MemoryBase) -> None:
    a, b, c = (UserMsg("alice", w) for w in "abc")
    assert await mem.add([a, b, a], marks="hint") == 2
    assert await mem.add([b, c]) == 1  # b ignored: keeps its content, marks and position
    assert await mem.get_marks(b.id) == ["hint"]
    b2 = UserMsg("alice", "B", id=b.id)
    assert await mem.add(b2, marks="new", on_duplicate="replace") == 0
    assert await mem.get_marks(b.id) == ["new"]
    with pytest.raises(MemoryStoreError, match="already stored"):
        await mem.add([UserMsg("alice", "d"), c], on_duplicate="error")
    assert [m.get_text_content() for m in await mem.get()] == ["a", "B", "c"]
    assert [m.id for m in await mem.get(marks="hint")] == [a.id]


async def test_sqlite_in_memory_database_keeps_the_sqlalchemy_path(unique_id: str) -> None:
    """No file to share with a worker connection: every write goes through the engine."""
    pytest.importorskip("aiosqlite", reason="the 'sql' extra is not installed")
    from mnemoscope.memory import AsyncSQLAlchemyMemory

    mem = AsyncSQLAlchemyMemory("sqlite+aiosqlite://", user_id=unique_id)
    assert type(mem._dialect).__name__ == "SqlDialect"  # the portable path is the point
    await _duplicates_marks_and_order(mem)
    await mem.aclose()


async def test_sqlite_plain_engine_file_is_shared_by_both_paths(
    tmp_path: Path, unique_id: str
) -> None:
    """An engine built without ``create_engine``: the worker writes, the engine reads, and
    the file's journal mode is left as the user had it."""
    pytest.importorskip("aiosqlite", reason="the 'sql' extra is not installed")
    from sqlalchemy.ext.asyncio import create_async_engine

    from mnemoscope.memory import AsyncSQLAlchemyMemory

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'plain.db'}")
    mem = AsyncSQLAlchemyMemory(engine, user_id=unique_id)
    assert type(mem._dialect).__name__ == "SQLiteDialect"  # the worker writes
    await _duplicates_marks_and_order(mem)
    assert await mem.delete_by_mark("new") == 1
    assert await mem.add(UserMsg("alice", "e")) == 1
    assert [m.get_text_content() for m in await mem.get()] == ["a", "c", "e"]
    async with engine.connect() as conn:
        assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar() == "delete"
    await mem.aclose()
    await engine.dispose()


async def test_sqlite_deletes_run_in_the_worker_and_retry_while_locked(
    tmp_path: Path, unique_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``delete``, ``delete_by_mark`` and ``clear`` on a file: one worker transaction each
    (nothing through the engine), retried while another writer holds the file."""
    pytest.importorskip("aiosqlite", reason="the 'sql' extra is not installed")
    import sqlite3

    import sqlalchemy as sa

    from mnemoscope.memory import AsyncSQLAlchemyMemory, _sqlalchemy, _sqlalchemy_sqlite

    # a short busy timeout, so that a held lock surfaces as an error to retry on
    monkeypatch.setattr(_sqlalchemy, "SQLITE_BUSY_TIMEOUT_MS", 50)
    path = tmp_path / "locked.db"
    mem = AsyncSQLAlchemyMemory(url=f"sqlite+aiosqlite:///{path}", user_id=unique_id)
    msgs = [UserMsg("u", str(i)) for i in range(6)]
    await mem.add(msgs[:4], marks="a")
    await mem.add(msgs[4:], marks=["a", "b"])
    assert await mem.update_marks(msgs[1].id, add="b") == 1

    holder = sqlite3.connect(path, isolation_level=None)  # another writer of the file
    errors: list[str] = []
    release_on_error = True
    real_retryable = _sqlalchemy_sqlite.retryable

    def retryable(exc: sqlite3.Error) -> bool:  # the real decision, observed
        errors.append(str(exc))
        if release_on_error and holder.in_transaction:
            holder.execute("COMMIT")
        return real_retryable(exc)

    monkeypatch.setattr(_sqlalchemy_sqlite, "retryable", retryable)
    engine_writes: list[str] = []

    @sa.event.listens_for(mem.engine.sync_engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith(("DELETE", "INSERT", "UPDATE", "BEGIN IMM")):
            engine_writes.append(statement)

    # held for longer than every attempt: reported, nothing deleted
    release_on_error = False
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(MemoryStoreError, match="delete failed after 5 attempts"):
        await mem.delete(msgs[0].id)
    assert len(errors) == 5 and all("locked" in e for e in errors)
    holder.execute("COMMIT")
    assert await mem.size() == 6

    release_on_error = True
    errors.clear()
    holder.execute("BEGIN IMMEDIATE")
    assert await mem.delete([msgs[0].id, "absent", msgs[0].id]) == 1
    assert errors == ["database is locked"]  # one failed attempt, then the retry succeeded
    assert await mem.get_marks(msgs[0].id) is None

    holder.execute("BEGIN IMMEDIATE")
    assert await mem.delete_by_mark(["b", "absent"]) == 3  # msgs 1, 4, 5
    assert [m.get_text_content() for m in await mem.get()] == ["2", "3"]
    assert await mem.get_marks(msgs[2].id) == ["a"]
    async with mem.engine.connect() as conn:  # no mark row outlives its message
        marks = await conn.execute(sa.select(mem.marks.c.msg_id).where(mem._where(mem.marks)))
        assert sorted(r[0] for r in marks) == sorted([msgs[2].id, msgs[3].id])

    holder.execute("BEGIN IMMEDIATE")
    await mem.clear()
    assert len(errors) == 3
    assert await mem.size() == 0
    assert await mem.add(UserMsg("u", "again")) == 1
    async with mem.engine.connect() as conn:  # positions are never reused after clear()
        seqs = await conn.execute(sa.select(mem.messages.c.seq).where(mem._where(mem.messages)))
        assert [r[0] for r in seqs] == [7]
    assert engine_writes == []
    holder.close()
    await mem.aclose()


@pytest.mark.services
async def test_postgres_add_probes_ids_by_index_on_unanalysed_tables(
    postgres_url: str, unique_id: str
) -> None:
    """The one-statement add looks each id up through the unique index even before
    autovacuum has analysed the tables, so its cost does not grow with the session."""
    import sqlalchemy as sa

    from mnemoscope.memory import AsyncSQLAlchemyMemory

    prefix = f"t{unique_id.replace('-', '')[:20]}"
    engine = AsyncSQLAlchemyMemory.create_engine(postgres_url)
    mem = AsyncSQLAlchemyMemory(engine, user_id="u", table_prefix=prefix)
    try:
        await mem.add([UserMsg("alice", str(i)) for i in range(2000)])
        await mem.add(UserMsg("alice", "one more"), marks="hint")
        async with engine.connect() as conn:
            rows = await conn.exec_driver_sql(
                "EXPLAIN " + mem._dialect.sql.batch,
                ("u", "default", ["new-id"], ["{}"], ["hint"]),
            )
            plan = "\n".join(r[0] for r in rows)
            await conn.rollback()
        assert f"Index Scan using {prefix}_msg_uq" in plan
        assert "msg_id)::text = n.msg_id" in plan  # the id is part of the index condition
        assert f"Seq Scan on {prefix}_messages" not in plan
        assert await mem.size() == 2001
        assert len(await mem.get(marks="hint")) == 1
    finally:
        async with engine.begin() as conn:
            for table in ("marks", "messages", "sessions"):
                await conn.execute(sa.text(f"DROP TABLE IF EXISTS {prefix}_{table}"))
        await engine.dispose()


def test_sql_configuration_errors(tmp_path: Path) -> None:
    pytest.importorskip("aiosqlite", reason="the 'sql' extra is not installed")
    from sqlalchemy.ext.asyncio import async_sessionmaker

    from mnemoscope.memory import AsyncSQLAlchemyMemory

    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(UserError, match="engine_or_session must be"):
        AsyncSQLAlchemyMemory(42)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="not both"):
        AsyncSQLAlchemyMemory(url, url=url)
    with pytest.raises(UserError, match="table_prefix"):
        AsyncSQLAlchemyMemory(url, table_prefix="drop table;")
    with pytest.raises(UserError, match="bound to an AsyncEngine"):
        AsyncSQLAlchemyMemory(async_sessionmaker())
    with pytest.raises(UserError, match="user_id is 200 characters"):
        AsyncSQLAlchemyMemory(url, user_id="u" * 200)
    with pytest.raises(UserError, match="invalid database URL"):
        AsyncSQLAlchemyMemory("not a url")


async def test_sql_rejects_overlong_ids_before_writing(tmp_path: Path) -> None:
    pytest.importorskip("aiosqlite", reason="the 'sql' extra is not installed")
    from mnemoscope.memory import AsyncSQLAlchemyMemory

    mem = AsyncSQLAlchemyMemory(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(UserError, match="message id"):
        await mem.add([UserMsg("a", "ok"), UserMsg("a", "long", id="x" * 129)])
    with pytest.raises(UserError, match="mark"):
        await mem.add(UserMsg("a", "ok"), marks="m" * 129)
    assert await mem.size() == 0
    await mem.aclose()


# ---------------------------------------------------------------- missing extras
@pytest.mark.parametrize(
    ("module", "blocked", "extra", "name"),
    [
        ("mnemoscope.memory._redis", "redis", "redis", "RedisMemory"),
        ("mnemoscope.memory._sqlalchemy", "sqlalchemy", "sql", "AsyncSQLAlchemyMemory"),
    ],
)
def test_missing_extra_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, blocked: str, extra: str, name: str
) -> None:
    for mod in list(sys.modules):
        if mod in (blocked, module) or mod.startswith(blocked + "."):
            monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, blocked, None)  # "not installed"
    with pytest.raises(MissingExtraError) as info:
        importlib.import_module(module)
    assert f"{name} requires the {extra!r} extra" in str(info.value)
    assert f"pip install 'mnemoscope[{extra}]'" in str(info.value)
    import mnemoscope.memory

    with pytest.raises(ImportError, match=rf"mnemoscope\[{extra}\]"):
        getattr(mnemoscope.memory, name)


def test_missing_sql_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemoscope.memory import AsyncSQLAlchemyMemory

    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'mnemoscope\[sql\]'"):
        AsyncSQLAlchemyMemory("postgresql+asyncpg://nobody@127.0.0.1:1/none")


# ------------------------------------------------------------------ MariaDB fast path
# a table prefix too long for the name of the single add's stored procedure (64
# characters): its adds send the anonymous block instead
BLOCK_PREFIX = "b" * 54


@pytest.fixture(params=["procedure", "block"])
async def mariadb_memory(mariadb_url: str, unique_id: str, request: pytest.FixtureRequest) -> Any:
    """``(memory, statements)``: the SQL statements its engine sent; single adds through
    the stored procedure, or (a long table prefix) the block. (Killed connections:
    ``test_faults.py``.)"""
    import sqlalchemy as sa

    from mnemoscope.memory import AsyncSQLAlchemyMemory

    engine = AsyncSQLAlchemyMemory.create_engine(mariadb_url)
    statements: list[str] = []

    @sa.event.listens_for(engine.sync_engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    prefix = "mnemoscope" if request.param == "procedure" else BLOCK_PREFIX
    mem = AsyncSQLAlchemyMemory(engine, user_id=unique_id, table_prefix=prefix)
    await mem.size()  # creates the tables (and the procedure, where it can)
    async with engine.connect() as conn:
        routines = await conn.execute(
            sa.text(
                "SELECT ROUTINE_NAME FROM information_schema.ROUTINES "
                "WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = :n"
            ),
            {"n": f"{prefix}_add_one_v1"},
        )
        assert len(list(routines)) == (1 if request.param == "procedure" else 0)
    yield mem, statements
    await mem.clear()
    await engine.dispose()


async def _seqs(mem: Any) -> list[tuple[str, int]]:
    import sqlalchemy as sa

    t = mem.messages
    async with mem.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(t.c.msg_id, t.c.seq).where(mem._where(t)).order_by(t.c.seq)
        )
        return [(r[0], r[1]) for r in rows]


@pytest.mark.services
async def test_mariadb_ignore_add_is_one_statement(mariadb_memory: Any) -> None:
    mem, statements = mariadb_memory
    a, b, c = UserMsg("u", "a"), UserMsg("u", "b"), UserMsg("u", "c")
    await mem.add(a)  # creates the tables and the session's counter row
    statements.clear()
    assert await mem.add(b, marks="hint") == 1
    # (one statement per add is counted on the server in test_write_paths.py: the fast
    # path runs on the driver connection, which SQLAlchemy's events do not see)
    # stored ids and repeats inside the batch are skipped; positions stay contiguous
    assert await mem.add([a, c, c, UserMsg("u", "d")], marks=["x", "hint"]) == 2
    assert await mem.add([a, b]) == 0
    assert await mem.add(a, marks="late") == 0  # one stored message: rolled back, no position
    seqs = await _seqs(mem)
    assert [s for _, s in seqs] == [1, 2, 3, 4]
    assert [i for i, _ in seqs][:3] == [a.id, b.id, c.id]
    assert await mem.get_marks(a.id) == []  # an ignored duplicate gets no marks
    assert await mem.get_marks(b.id) == ["hint"]
    assert await mem.get_marks(c.id) == ["hint", "x"]
    assert [m.get_text_content() for m in await mem.get(marks="x")] == ["c", "d"]
    # the modes that may change stored rows keep the transactional path
    statements.clear()
    await mem.add(UserMsg("u", "e"), on_duplicate="error")
    assert len(statements) > 1


@pytest.mark.services
async def test_mariadb_single_add_survives_its_procedure_being_dropped(
    mariadb_memory: Any,
) -> None:
    import sqlalchemy as sa

    mem, _ = mariadb_memory
    a, b = UserMsg("u", "a"), UserMsg("u", "b")
    assert await mem.add(a, marks="m") == 1
    async with mem.engine.begin() as conn:  # as an administrator might, with the tables kept
        found = await conn.execute(
            sa.text(
                "SELECT ROUTINE_NAME FROM information_schema.ROUTINES "
                "WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = :n"
            ),
            {"n": f"{mem.table_prefix}_add_one_v1"},
        )
        for (name,) in list(found):
            await conn.execute(sa.text(f"DROP PROCEDURE {name}"))
    try:
        assert await mem.add(b, marks="m") == 1  # the block instead
        assert await mem.add(b) == 0
        assert [m.id for m in await mem.get(marks="m")] == [a.id, b.id]
    finally:  # the next memory of this prefix in the process creates it again
        from mnemoscope.memory import _sqlalchemy, _sqlalchemy_mysql

        _sqlalchemy._READY.pop(mem.engine.sync_engine, None)
        _sqlalchemy_mysql._PROCEDURES.pop(mem.engine.sync_engine, None)


@pytest.mark.services
async def test_mariadb_failed_add_block_stores_nothing(mariadb_memory: Any) -> None:
    import sqlalchemy as sa

    mem, _ = mariadb_memory
    await mem.add(UserMsg("u", "first"))
    doomed = UserMsg("u", "doomed")
    # a foreign orphan mark row makes the block's last INSERT fail after the message INSERT
    k = mem.marks
    async with mem.engine.begin() as conn:
        await conn.execute(
            sa.insert(k).values(
                user_id=mem.user_id, session_id=mem.session_id, msg_id=doomed.id, mark="m", seq=9
            )
        )
    with pytest.raises(MemoryStoreError):
        await mem.add(doomed, marks="m")
    with pytest.raises(MemoryStoreError):  # the batch form of the block
        await mem.add([UserMsg("u", "other"), doomed], marks="m")
    assert [m.get_text_content() for m in await mem.get()] == ["first"]
    async with mem.engine.begin() as conn:
        await conn.execute(sa.delete(k).where(mem._where(k), k.c.msg_id == doomed.id))
    assert await mem.add(doomed, marks="m") == 1
    assert [s for _, s in await _seqs(mem)] == [1, 2]  # the failed attempts took no position


@pytest.mark.services
async def test_mariadb_delete_in_chunks(
    mariadb_memory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemoscope.memory import _sqlalchemy_mysql

    mem, statements = mariadb_memory
    msgs = [UserMsg("u", str(i)) for i in range(7)]
    await mem.add(msgs, marks="m")
    monkeypatch.setattr(_sqlalchemy_mysql, "DELETE_CHUNK", 3)
    statements.clear()
    doomed = [m.id for m in msgs[::2]] + ["absent"]
    assert await mem.delete(doomed) == 4
    assert len(statements) == 4  # two chunks, marks then messages
    assert [m.get_text_content() for m in await mem.get()] == ["1", "3", "5"]
    assert [m.get_text_content() for m in await mem.get(marks="m")] == ["1", "3", "5"]
    assert await mem.get_marks(msgs[0].id) is None
    assert await mem.delete_by_mark("m") == 3 and await mem.size() == 0
