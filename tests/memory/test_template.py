"""``MemoryBase`` validates every public call once and hands its backend one normalised
request per call (the template methods): what each hook receives, and the requests that
never reach a backend."""

from __future__ import annotations

from typing import Any

import pytest

from mnemoscope.errors import UserError, ValidationError
from mnemoscope.memory import AddRequest, GetQuery, InMemoryMemory, MarkUpdate
from mnemoscope.message import Msg, UserMsg


class Recording(InMemoryMemory):
    """The in-process backend, recording what reaches each hook."""

    def __init__(self) -> None:
        super().__init__(user_id="u", session_id="s")
        self.calls: list[tuple[str, Any]] = []

    async def _add(self, request: AddRequest) -> int:
        self.calls.append(("add", request))
        return await super()._add(request)

    async def _get(self, query: GetQuery) -> list[Msg]:
        self.calls.append(("get", query))
        return await super()._get(query)

    async def _delete(self, ids: list[str]) -> int:
        self.calls.append(("delete", ids))
        return await super()._delete(ids)

    async def _delete_by_mark(self, marks: list[str]) -> int:
        self.calls.append(("delete_by_mark", marks))
        return await super()._delete_by_mark(marks)

    async def _update_marks(self, update: MarkUpdate) -> int:
        self.calls.append(("update_marks", update))
        return await super()._update_marks(update)


async def test_add_hands_the_backend_each_message_serialised_once_with_its_marks() -> None:
    memory = Recording()
    a, b = UserMsg("alice", "a"), UserMsg("alice", "b")
    assert await memory.add([a, b], {b.id: ["x", "x", "y"]}, on_duplicate="replace") == 2
    ((name, request),) = memory.calls
    assert name == "add"
    assert request.msgs == [a, b]
    assert request.docs == [a.model_dump_json(), b.model_dump_json()]
    assert request.payload == [(a.id, request.docs[0]), (b.id, request.docs[1])]
    assert request.marks_of(a.id) == [] and request.marks_of(b.id) == ["x", "y"]
    assert request.on_duplicate == "replace"


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda m: m.add(UserMsg("a", "x"), marks=""), UserError),
        (lambda m: m.add(UserMsg("a", "x"), marks={"other": "m"}), UserError),
        (lambda m: m.add(UserMsg("a", "x"), on_duplicate="skip"), UserError),
        (lambda m: m.add(["not a Msg"]), UserError),
        (lambda m: m.add([UserMsg("a", "ok"), UserMsg("a", "\udcff")]), ValidationError),
        (lambda m: m.get(marks=[1]), UserError),
        (lambda m: m.update_marks(None, add=""), UserError),
        (lambda m: m.delete_by_mark([None]), UserError),
    ],
)
async def test_bad_arguments_are_refused_before_the_backend_sees_them(
    call: Any, error: type[Exception]
) -> None:
    memory = Recording()
    with pytest.raises(error):
        await call(memory)
    assert memory.calls == []


async def test_requests_that_change_nothing_never_reach_the_backend() -> None:
    memory = Recording()
    assert await memory.add([]) == 0
    assert await memory.add(None) == 0
    assert await memory.get(last_n=0) == []
    assert await memory.get(last_n=-3) == []
    assert await memory.delete([]) == 0
    assert await memory.delete_by_mark(None) == 0
    assert await memory.update_marks([], add="x") == 0
    assert memory.calls == []


async def test_hooks_receive_normalised_arguments() -> None:
    memory = Recording()
    msg = UserMsg("alice", "a")
    await memory.add(msg)
    memory.calls.clear()
    assert await memory.delete_by_mark("gone") == 0
    assert await memory.update_marks(msg.id, add="x", remove=["y", "y"]) == 1
    assert await memory.update_marks(None, add="z") == 1
    assert [m.id for m in await memory.get(marks="x", exclude_marks="z", last_n=5)] == []
    assert await memory.delete([msg.id, msg.id]) == 1
    assert memory.calls == [
        ("delete_by_mark", ["gone"]),
        ("delete", []),  # InMemoryMemory's own _delete_by_mark deletes what it found
        ("update_marks", MarkUpdate([msg.id], ["x"], ["y"])),
        ("update_marks", MarkUpdate(None, ["z"], [])),
        ("get", GetQuery(5, ["x"], ["z"], "skip")),
        ("delete", [msg.id]),
    ]
