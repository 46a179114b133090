"""The short-term memory contract, run over every backend against real servers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from mnemoscope.errors import CorruptRecordError, MemoryStoreError, UserError
from mnemoscope.memory import InMemoryMemory, MemoryBase, MemoryState
from mnemoscope.message import AssistantMsg, Msg, UserMsg

MakeMemory = Callable[..., MemoryBase]


def texts(msgs: list[Msg]) -> list[str]:
    return [m.get_text_content() for m in msgs]


def msgs(*words: str) -> list[Msg]:
    return [UserMsg("alice", w) for w in words]


# ------------------------------------------------------------------------ adding
async def test_add_one_and_many_keeps_call_and_list_order(make_memory: MakeMemory) -> None:
    mem = make_memory()
    assert await mem.size() == 0
    assert await mem.get() == []
    assert await mem.add(UserMsg("alice", "a")) == 1
    assert await mem.add(msgs("b", "c", "d")) == 3
    assert await mem.add(None) == 0
    assert await mem.add([]) == 0
    assert await mem.add(UserMsg("alice", "e")) == 1
    got = await mem.get()
    assert texts(got) == ["a", "b", "c", "d", "e"]
    assert await mem.size() == 5
    assert all(isinstance(m, Msg) for m in got)


async def test_messages_round_trip_exactly(make_memory: MakeMemory) -> None:
    mem = make_memory()
    original = AssistantMsg("bot", 'héllo ✓ "quoted"', metadata={"k": [1, {"x": None}]})
    await mem.add(original)
    (back,) = await mem.get()
    assert back == original
    assert back.model_dump_json() == original.model_dump_json()


async def test_add_rejects_non_messages(make_memory: MakeMemory) -> None:
    mem = make_memory()
    with pytest.raises(UserError):
        await mem.add(["not a message"])  # type: ignore[list-item]
    with pytest.raises(UserError):
        await mem.add(UserMsg("a", "x"), marks=[""])
    with pytest.raises(UserError, match="on_duplicate must be 'ignore', 'replace' or 'error'"):
        await mem.add(UserMsg("a", "x"), on_duplicate="skip")  # type: ignore[arg-type]
    assert await mem.size() == 0


async def test_duplicate_ignore_keeps_stored_message_marks_and_position(
    make_memory: MakeMemory,
) -> None:
    mem = make_memory()
    a, b = msgs("a", "b")
    await mem.add([a, b], marks="first")
    changed = a.model_copy(update={"content": UserMsg("x", "A2").content})
    assert await mem.add([changed, UserMsg("alice", "c")], marks="second") == 1
    assert texts(await mem.get()) == ["a", "b", "c"]
    assert await mem.get_marks(a.id) == ["first"]


async def test_duplicate_replace_overwrites_in_place(make_memory: MakeMemory) -> None:
    mem = make_memory()
    a, b, c = msgs("a", "b", "c")
    await mem.add([a, b, c], marks=["old", "keep"])
    changed = a.model_copy(update={"content": UserMsg("x", "A2").content})
    assert await mem.add([changed, UserMsg("alice", "d")], marks="new", on_duplicate="replace") == 1
    assert texts(await mem.get()) == ["A2", "b", "c", "d"]
    assert await mem.get_marks(a.id) == ["new"]
    assert texts(await mem.get(marks="old")) == ["b", "c"]
    assert texts(await mem.get(marks="new")) == ["A2", "d"]


async def test_duplicate_error_stores_nothing_of_the_batch(make_memory: MakeMemory) -> None:
    mem = make_memory()
    a, b = msgs("a", "b")
    await mem.add(a)
    with pytest.raises(MemoryStoreError) as info:
        await mem.add([b, a], on_duplicate="error")
    assert a.id in str(info.value)
    assert texts(await mem.get()) == ["a"]
    assert await mem.get_marks(b.id) is None
    assert await mem.add(b, on_duplicate="error") == 1


async def test_repeated_id_inside_one_batch(make_memory: MakeMemory) -> None:
    mem = make_memory()
    a = UserMsg("alice", "a")
    a2 = a.model_copy(update={"content": UserMsg("x", "a2").content})
    assert await mem.add([a, UserMsg("alice", "b"), a2]) == 2
    assert texts(await mem.get()) == ["a", "b"]
    await mem.clear()
    assert await mem.add([a, UserMsg("alice", "b"), a2], on_duplicate="replace") == 2
    assert texts(await mem.get()) == ["a2", "b"]


# ----------------------------------------------------------------------- reading
async def test_last_n(make_memory: MakeMemory) -> None:
    mem = make_memory()
    await mem.add(msgs("a", "b", "c", "d"))
    assert texts(await mem.get(last_n=2)) == ["c", "d"]
    assert texts(await mem.get(last_n=10)) == ["a", "b", "c", "d"]
    assert await mem.get(last_n=0) == []


async def test_mark_filters_are_any_of_and_keep_insertion_order(make_memory: MakeMemory) -> None:
    mem = make_memory()
    await mem.add(msgs("a"), marks="hint")
    await mem.add(msgs("b"), marks=["summary", "tool_result"])
    await mem.add(msgs("c"))
    await mem.add(msgs("d"), marks=["hint", "summary"])
    await mem.add(msgs("e"), marks="mine")
    assert texts(await mem.get(marks="hint")) == ["a", "d"]
    assert texts(await mem.get(marks=["hint", "summary"])) == ["a", "b", "d"]
    assert texts(await mem.get(exclude_marks="summary")) == ["a", "c", "e"]
    assert texts(await mem.get(exclude_marks=["summary", "hint"])) == ["c", "e"]
    assert texts(await mem.get(marks=["hint", "summary"], exclude_marks="tool_result")) == [
        "a",
        "d",
    ]
    assert texts(await mem.get(marks=["hint", "summary"], last_n=2)) == ["b", "d"]
    assert texts(await mem.get(exclude_marks="hint", last_n=2)) == ["c", "e"]
    assert await mem.get(marks="nobody") == []
    # marking an early message later does not move it
    first = (await mem.get(last_n=5))[0]
    await mem.update_marks(first.id, add="late")
    await mem.update_marks((await mem.get(marks="mine"))[0].id, add="late")
    assert texts(await mem.get(marks=["late", "mine"])) == ["a", "e"]


async def test_get_marks(make_memory: MakeMemory) -> None:
    mem = make_memory()
    a, b = msgs("a", "b")
    await mem.add(a, marks=["z", "hint"])
    await mem.add(b)
    assert await mem.get_marks(a.id) == ["hint", "z"]
    assert await mem.get_marks(b.id) == []
    assert await mem.get_marks("missing") is None


# ---------------------------------------------------------------------- deleting
async def test_delete_by_ids(make_memory: MakeMemory) -> None:
    mem = make_memory()
    a, b, c = msgs("a", "b", "c")
    await mem.add([a, b, c], marks="hint")
    assert await mem.delete([a.id, "missing", c.id]) == 2
    assert await mem.delete(b.id) == 1
    assert await mem.delete(b.id) == 0
    assert await mem.delete([]) == 0
    assert await mem.size() == 0
    assert await mem.get(marks="hint") == []
    assert await mem.get_marks(a.id) is None
    # the id can be stored again, at the end
    await mem.add(UserMsg("alice", "d"))
    await mem.add(a)
    assert texts(await mem.get()) == ["d", "a"]
    assert await mem.get_marks(a.id) == []


async def test_delete_by_mark(make_memory: MakeMemory) -> None:
    mem = make_memory()
    await mem.add(msgs("a"), marks="hint")
    await mem.add(msgs("b"), marks=["summary", "keep"])
    await mem.add(msgs("c"), marks="keep")
    await mem.add(msgs("d"))
    assert await mem.delete_by_mark(["hint", "summary"]) == 2
    assert texts(await mem.get()) == ["c", "d"]
    assert texts(await mem.get(marks="keep")) == ["c"]
    assert await mem.delete_by_mark("hint") == 0
    assert await mem.delete_by_mark(None) == 0


async def test_update_marks(make_memory: MakeMemory) -> None:
    mem = make_memory()
    a, b, c = msgs("a", "b", "c")
    await mem.add([a, b], marks="x")
    await mem.add(c)
    assert await mem.update_marks([a.id, "missing"], add=["y", "z"], remove="x") == 1
    assert await mem.get_marks(a.id) == ["y", "z"]
    assert texts(await mem.get(marks="x")) == ["b"]
    assert texts(await mem.get(marks="y")) == ["a"]
    # ids=None: every message; adding and removing the same mark keeps it
    assert await mem.update_marks(None, add="all", remove="z") == 3
    assert texts(await mem.get(marks="all")) == ["a", "b", "c"]
    assert await mem.get(marks="z") == []
    assert await mem.update_marks(c.id, add="k", remove="k") == 1
    assert "k" in (await mem.get_marks(c.id) or [])
    assert await mem.update_marks(a.id, add="y") == 1  # already there: no duplicate
    assert await mem.get_marks(a.id) == ["all", "y"]
    assert await mem.update_marks("missing", add="y") == 0


async def test_clear_and_scoping(make_memory: MakeMemory) -> None:
    mine = make_memory(session_id="s1")
    other_session = make_memory(session_id="s2")
    other_user = make_memory(session_id="s1", user_id=f"{mine.user_id}-other")
    shared_id = UserMsg("alice", "same id everywhere")
    for mem in (mine, other_session, other_user):
        await mem.add([shared_id, UserMsg("alice", mem.session_id)], marks="hint")
    await mine.clear()
    assert await mine.size() == 0
    assert await mine.get(marks="hint") == []
    assert await other_session.size() == 2
    assert await other_user.size() == 2
    assert texts(await other_user.get(marks="hint")) == ["same id everywhere", "s1"]
    await mine.add(UserMsg("alice", "after clear"))
    assert texts(await mine.get()) == ["after clear"]


# ------------------------------------------------------------- export / import
async def test_export_import_round_trip_across_backends(make_memory: MakeMemory) -> None:
    mem = make_memory()
    a, b, c = msgs("a", "b", "c")
    await mem.add(a, marks=["hint"])
    await mem.add([b, c], marks=["x", "y"])
    await mem.update_marks(c.id, remove="y")
    state = await mem.export_state()
    assert [e.marks for e in state.messages] == [["hint"], ["x", "y"], ["x"]]
    assert (state.user_id, state.session_id) == (mem.user_id, mem.session_id)

    # through JSON into the in-memory backend and back into this backend's fresh session
    doc = state.model_dump(mode="json")
    mirror = InMemoryMemory()
    await mirror.import_state(MemoryState.model_validate_json(state.model_dump_json()))
    assert await mirror.get() == await mem.get()
    target = make_memory(session_id="imported")
    await target.add(UserMsg("alice", "will be replaced"))
    await target.import_state(await mirror.export_state())
    assert await target.get() == [a, b, c]
    assert texts(await target.get(marks="x")) == ["b", "c"]
    assert await target.get_marks(c.id) == ["x"]

    # replace=False appends (existing ids are replaced in place)
    extra = make_memory(session_id="extra")
    d = UserMsg("alice", "d")
    await extra.add(d)
    await extra.import_state(doc, replace=False)
    assert texts(await extra.get()) == ["d", "a", "b", "c"]

    # AgentScope-style aliases
    assert texts(await target.get_memory(mark="x", exclude_mark="y")) == ["c"]
    assert await target.update_messages_mark("z", old_mark="x") == 2
    assert texts(await target.get(marks="z")) == ["b", "c"]
    assert await target.get(marks="x") == []
    again = make_memory(session_id="again")
    await again.load_state_dict(await target.state_dict())
    assert (await again.export_state()).messages == (await target.export_state()).messages


# -------------------------------------------------------------------- concurrency
async def test_many_coroutines_lose_nothing_and_keep_per_writer_order(
    make_memory: MakeMemory,
) -> None:
    mem = make_memory()
    writers, per_writer = 20, 15

    async def writer(w: int) -> None:
        for i in range(per_writer):
            if i % 5 == 4:  # a tool-use/tool-result style pair in one batch
                pair = [UserMsg(f"w{w}", f"{w}:{i}:use"), UserMsg(f"w{w}", f"{w}:{i}:result")]
                await mem.add(pair, marks="pair")
            else:
                await mem.add(UserMsg(f"w{w}", f"{w}:{i}"))

    await asyncio.gather(*(writer(w) for w in range(writers)))
    got = texts(await mem.get())
    assert len(got) == len(set(got)) == writers * (per_writer + per_writer // 5)
    for w in range(writers):
        own = [t for t in got if t.startswith(f"{w}:")]
        expected = []
        for i in range(per_writer):
            expected += [f"{w}:{i}:use", f"{w}:{i}:result"] if i % 5 == 4 else [f"{w}:{i}"]
        assert own == expected
        # a batch is contiguous: nothing interleaves between a use and its result
        for i in range(4, per_writer, 5):
            pos = got.index(f"{w}:{i}:use")
            assert got[pos + 1] == f"{w}:{i}:result"
    assert len(await mem.get(marks="pair")) == writers * (per_writer // 5) * 2


async def test_concurrent_duplicate_adds_store_once(make_memory: MakeMemory) -> None:
    mem = make_memory()
    same = msgs(*[f"m{i}" for i in range(10)])
    counts = await asyncio.gather(*(mem.add(same, marks="hint") for _ in range(8)))
    assert sum(counts) == 10
    assert texts(await mem.get()) == [f"m{i}" for i in range(10)]
    assert len(await mem.get(marks="hint")) == 10


# ------------------------------------------------------------------------- base
async def test_backend_is_a_memory_base_and_async_context_manager(make_memory: MakeMemory) -> None:
    mem = make_memory()
    assert isinstance(mem, MemoryBase)
    async with mem as entered:
        assert entered is mem
        await entered.add(UserMsg("alice", "x"))


def test_corrupt_record_error_carries_id() -> None:
    err = CorruptRecordError("abc", "bad json")
    assert err.record_id == "abc" and "abc" in str(err)
