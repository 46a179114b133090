"""The write and read paths of the short-term memory backends (issue 12): per-message marks
stored in the same atomic write as their message, single adds as one statement with no pool
``ROLLBACK``, reads decoded in one validation call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory import MemoryBase
from mnemoscope.message import AssistantMsg, Msg, ToolResultBlock, ToolUseBlock, UserMsg

MakeMemory = Callable[..., MemoryBase]


def _step() -> tuple[Msg, Msg]:
    """An agent step: the tool use and the message holding its result."""
    use = ToolUseBlock(id="call-1", name="search", input={"q": "x"})
    step = AssistantMsg("agent", [use])
    result = UserMsg("tool", [ToolResultBlock(id="call-1", name="search", output="found")])
    return step, result


# ------------------------------------------------------------- per-message marks
async def test_per_message_marks_are_stored_with_their_message(make_memory: MakeMemory) -> None:
    mem = make_memory()
    step, result = _step()
    assert await mem.add([step, result], marks={result.id: "tool_result"}) == 2
    assert await mem.get_marks(step.id) == []
    assert await mem.get_marks(result.id) == ["tool_result"]
    assert [m.id for m in await mem.get(marks="tool_result")] == [result.id]
    assert [m.id for m in await mem.get(exclude_marks="tool_result")] == [step.id]
    # a single message with a mapping, and a mapping that leaves every message unmarked
    one = UserMsg("alice", "one")
    assert await mem.add(one, marks={one.id: ["a", "b", "a"]}) == 1
    assert await mem.get_marks(one.id) == ["a", "b"]
    two = UserMsg("alice", "two")
    assert await mem.add([two], marks={two.id: None}) == 1
    assert await mem.get_marks(two.id) == []
    assert [m.id for m in await mem.get()] == [step.id, result.id, one.id, two.id]


async def test_per_message_marks_in_large_batches_and_every_duplicate_mode(
    make_memory: MakeMemory,
) -> None:
    mem = make_memory()
    batch = [UserMsg("alice", str(i)) for i in range(30)]
    marks: dict[str, Any] = {m.id: ["hint", f"n{i % 3}"] for i, m in enumerate(batch) if i % 3 == 0}
    assert await mem.add(batch, marks=marks) == 30
    for i, m in enumerate(batch):
        assert await mem.get_marks(m.id) == (["hint", "n0"] if i % 3 == 0 else [])
    assert [m.id for m in await mem.get(marks="hint")] == [m.id for m in batch[::3]]
    # ignore: a stored id keeps its marks, a new one in the same batch gets its own
    new = UserMsg("alice", "new")
    assert await mem.add([batch[0], new], marks={batch[0].id: "x", new.id: "y"}) == 1
    assert await mem.get_marks(batch[0].id) == ["hint", "n0"]
    assert await mem.get_marks(new.id) == ["y"]
    # replace: a replaced message gets exactly the marks this call gives it (none, or its own)
    edited = batch[1].model_copy(update={"content": UserMsg("alice", "1 edited").content})
    await mem.add([batch[0], edited], marks={edited.id: "edited"}, on_duplicate="replace")
    assert await mem.get_marks(batch[0].id) == []
    assert await mem.get_marks(edited.id) == ["edited"]
    assert [m.get_text_content() for m in await mem.get(marks="edited")] == ["1 edited"]
    # error: the whole batch, marks included, is refused when one id is stored
    fresh = UserMsg("alice", "fresh")
    with pytest.raises(MemoryStoreError):
        await mem.add([fresh, new], marks={fresh.id: "z"}, on_duplicate="error")
    assert await mem.get_marks(fresh.id) is None
    assert await mem.get(marks="z") == []
    assert await mem.add([fresh], marks={fresh.id: "z"}, on_duplicate="error") == 1
    assert await mem.get_marks(fresh.id) == ["z"]


async def test_marks_naming_an_id_outside_the_batch_are_refused(make_memory: MakeMemory) -> None:
    mem = make_memory()
    a, b = UserMsg("alice", "a"), UserMsg("alice", "b")
    with pytest.raises(UserError, match="not in this add"):
        await mem.add([a], marks={b.id: "tool_result"})
    with pytest.raises(UserError, match="non-empty string"):
        await mem.add([a], marks={a.id: [""]})
    assert await mem.size() == 0


async def test_export_import_keeps_per_message_marks(make_memory: MakeMemory) -> None:
    mem = make_memory()
    step, result = _step()
    await mem.add([step, result], marks={result.id: ["tool_result", "x"]})
    state = await mem.export_state()
    other = make_memory(session_id="copy")
    await other.import_state(state)
    assert await other.get_marks(step.id) == []
    assert await other.get_marks(result.id) == ["tool_result", "x"]
    assert [m.id for m in await other.get()] == [step.id, result.id]


# ------------------------------------------------------------------------ reading
@pytest.mark.parametrize("backend", ["redis", "sqlite", "postgres", "mariadb"], indirect=True)
async def test_get_decodes_the_session_in_one_validation_call(
    make_memory: MakeMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = make_memory()
    msgs = [UserMsg("alice", f"m{i}") for i in range(300)]
    await mem.add(msgs)
    await mem.update_marks([m.id for m in msgs[::10]], add="hint")
    per_row: list[Any] = []
    original = Msg.model_validate_json

    def counting(data: Any, *args: Any, **kwargs: Any) -> Msg:
        per_row.append(data)
        return original(data, *args, **kwargs)

    monkeypatch.setattr(Msg, "model_validate_json", counting)
    assert await mem.get() == msgs
    assert await mem.get(marks="hint") == msgs[::10]
    assert (
        await mem.get(last_n=5, exclude_marks="hint")
        == [m for m in msgs if m not in msgs[::10]][-5:]
    )
    assert per_row == []  # no row was decoded on its own


async def _overwrite(backend: str, mem: Any, msg_id: str, payload: str) -> None:
    if backend == "redis":
        await mem.client.hset(mem.key("msgs"), msg_id, payload)
        return
    import sqlalchemy as sa

    t = mem.messages
    async with mem.engine.begin() as conn:
        await conn.execute(
            sa.update(t)
            .where(t.c.user_id == mem.user_id, t.c.session_id == mem.session_id)
            .where(t.c.msg_id == msg_id)
            .values(msg_json=payload)
        )


@pytest.mark.parametrize("backend", ["redis", "sqlite", "postgres", "mariadb"], indirect=True)
async def test_a_row_holding_two_documents_cannot_shift_the_others(
    make_memory: MakeMemory, backend: str
) -> None:
    """The rows are decoded as one joined JSON array; a row that is two messages (or half
    of one) must be found and reported, never make its neighbours change places."""
    mem = make_memory()
    a, b, c, d = (UserMsg("alice", w) for w in "abcd")
    await mem.add([a, b, c, d])
    await _overwrite(backend, mem, b.id, f"{a.model_dump_json()},{c.model_dump_json()}")
    # c's row swallowed by an open string: the join would be one message fewer, plus b's two
    await _overwrite(backend, mem, c.id, '{"id": "x", "name": "')
    assert await mem.get() == [a, d]
    assert [e.record_id for e in mem.corrupt_records] == [b.id, c.id]


# -------------------------------------------------------------- one round trip
@pytest.mark.services
async def test_mariadb_single_add_is_one_statement_without_pool_rollback(
    mariadb_url: str, unique_id: str
) -> None:
    """Measured on the server, on the pool's only connection: one question per add and no
    ``ROLLBACK`` when the connection goes back to the pool."""
    from mnemoscope.memory import AsyncSQLAlchemyMemory

    engine = AsyncSQLAlchemyMemory.create_engine(mariadb_url, pool_size=1, max_overflow=0)
    mem = AsyncSQLAlchemyMemory(engine, user_id=unique_id)

    async def counters() -> dict[str, int]:
        async with engine.connect() as conn:
            rows = await conn.exec_driver_sql(
                "SHOW SESSION STATUS WHERE Variable_name IN ('Questions', 'Com_rollback')"
            )
            found: list[Any] = list(rows)
            return {str(r[0]): int(r[1]) for r in found}

    def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        return {k: after[k] - before[k] for k in before}

    try:
        step, result = _step()
        await mem.add(UserMsg("alice", "creates the tables and the counter row"))
        idle = delta(await counters(), await counters())  # what reading the counters costs
        before = await counters()
        for i in range(5):
            assert await mem.add(UserMsg("alice", str(i)), marks="m" if i % 2 else None) == 1
        assert await mem.add([step, result], marks="pair") == 2
        busy = delta(before, await counters())
        assert busy["Questions"] - idle["Questions"] == 6
        assert busy["Com_rollback"] - idle["Com_rollback"] == 0
        assert await mem.get_marks(result.id) == ["pair"]
        assert await mem.size() == 8
    finally:
        await mem.clear()
        await engine.dispose()


@pytest.mark.services
async def test_mariadb_reads_and_duplicate_adds_leave_no_snapshot_on_the_connection(
    mariadb_url: str, unique_id: str
) -> None:
    """A pooled connection handed back without the pool's ROLLBACK must hold no open
    transaction: under ``autocommit=0`` a SELECT opens one the server does not report, and
    its snapshot would serve the next read on that connection stale rows."""
    from mnemoscope.memory import AsyncSQLAlchemyMemory

    engine = AsyncSQLAlchemyMemory.create_engine(mariadb_url, pool_size=1, max_overflow=0)
    other = AsyncSQLAlchemyMemory.create_engine(mariadb_url)
    mem = AsyncSQLAlchemyMemory(engine, user_id=unique_id)
    writer = AsyncSQLAlchemyMemory(other, user_id=unique_id)
    try:
        a, b, c = UserMsg("alice", "a"), UserMsg("alice", "b"), UserMsg("alice", "c")
        await mem.add(a)
        assert await mem.get() == [a]  # a read on the pool's only connection
        await writer.add(b)  # committed by another connection
        assert await mem.get() == [a, b]
        assert await mem.add(a) == 0  # the duplicate path of the one-message block
        await writer.add(c)
        assert await mem.get() == [a, b, c]
        assert await mem.get(marks="none") == []
        await writer.add(UserMsg("alice", "d"), marks="none")
        assert [m.get_text_content() for m in await mem.get(marks="none")] == ["d"]
    finally:
        await mem.clear()
        await engine.dispose()
        await other.dispose()


@pytest.mark.services
@pytest.mark.parametrize("backend", ["postgres", "mariadb"], indirect=True)
async def test_driver_paths_return_every_connection_to_the_pool(
    backend: str, backend_url: str, unique_id: str
) -> None:
    """Adds and reads cancelled at any point, on a one-connection pool, and on a pool that
    opens and closes a connection per call (``NullPool``): no connection is lost, and the
    store keeps working."""
    from sqlalchemy.pool import NullPool

    from mnemoscope.memory import AsyncSQLAlchemyMemory

    pools: list[dict[str, Any]] = [
        {"pool_size": 1, "max_overflow": 0, "pool_timeout": 5},
        {"poolclass": NullPool},
    ]
    for options in pools:
        engine = AsyncSQLAlchemyMemory.create_engine(backend_url, **options)
        mem = AsyncSQLAlchemyMemory(engine, user_id=unique_id)
        try:
            stored = [UserMsg("alice", "first")]
            await mem.add(stored[0])
            for i in range(40):
                msg = UserMsg("alice", str(i))
                add = asyncio.ensure_future(mem.add(msg, marks={msg.id: "m"}))
                read = asyncio.ensure_future(mem.get())
                for _ in range(i % 4):
                    await asyncio.sleep(0)
                add.cancel()
                read.cancel()
                await asyncio.gather(add, read, return_exceptions=True)
                if not add.cancelled() and add.exception() is None:
                    stored.append(msg)
            ids = [m.id for m in await asyncio.wait_for(mem.get(), 30)]
            acknowledged = {m.id for m in stored}
            assert [i for i in ids if i in acknowledged] == [m.id for m in stored]
            checked_out = getattr(engine.pool, "checkedout", None)  # QueuePool's count
            if checked_out is not None:
                assert checked_out() == 0  # every connection went back to the pool
            last = UserMsg("alice", "last")
            assert await asyncio.wait_for(mem.add(last, marks="end"), 30) == 1
            assert [m.id for m in await mem.get(marks="end")] == [last.id]
        finally:
            await mem.clear()
            await engine.dispose()
