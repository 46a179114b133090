"""In-process session store: fast, not shared between processes, gone on exit.

Example::

    memory = InMemoryMemory()
    await memory.add(UserMsg("alice", "hi"), marks="greeting")
    await memory.get(marks="greeting")
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from mnemoscope.errors import MemoryStoreError
from mnemoscope.memory._base import AddRequest, GetQuery, MarkUpdate, MemoryBase, marks_of
from mnemoscope.message import Msg


class InMemoryMemory(MemoryBase):
    """Messages in a dict keyed by id (insertion-ordered) plus a mark -> ids index.

    ``add`` is O(1) per message whatever the session length; filtering by mark touches
    only the messages carrying that mark. :meth:`get` returns the stored objects without
    copying them (as AgentScope does): treat them as read-only, or
    ``msg.model_copy(deep=True)`` before changing one.
    """

    def __init__(self, *, user_id: str = "default", session_id: str = "default") -> None:
        super().__init__(user_id=user_id, session_id=session_id)
        self._msgs: dict[str, Msg] = {}
        self._marks: dict[str, set[str]] = {}
        self._by_mark: dict[str, dict[str, None]] = {}
        self._seq: dict[str, int] = {}
        self._counter = itertools.count()

    async def _add(self, request: AddRequest) -> int:
        # what a persistent backend would refuse was refused by add() here too (the base
        # serialises every message first), rather than failing later at export_state
        items, plan, on_duplicate = request.msgs, request.marks, request.on_duplicate
        stored = self._msgs
        if on_duplicate == "error":
            dup = [m.id for m in items if m.id in stored]
            if dup:
                raise MemoryStoreError(
                    f"message ids already stored: {dup[:5]}; pass on_duplicate='ignore' "
                    "or 'replace'"
                )
        added = 0
        for msg in items:
            msg_id = msg.id
            if msg_id in stored:
                if on_duplicate == "ignore":
                    continue
                self._set_marks(msg_id, set())
            else:
                self._seq[msg_id] = next(self._counter)
                self._marks[msg_id] = set()
                added += 1
            stored[msg_id] = _snapshot(msg)
            mark_list = marks_of(plan, msg_id)
            if mark_list:
                self._set_marks(msg_id, set(mark_list))
        return added

    def _set_marks(self, msg_id: str, new: set[str]) -> None:
        old = self._marks.get(msg_id, set())
        for mark in old - new:
            bucket = self._by_mark.get(mark)
            if bucket is not None:
                bucket.pop(msg_id, None)
                if not bucket:
                    del self._by_mark[mark]
        for mark in new - old:
            self._by_mark.setdefault(mark, {})[msg_id] = None
        self._marks[msg_id] = new

    async def _delete(self, ids: list[str]) -> int:
        deleted = 0
        for msg_id in ids:
            if msg_id in self._msgs:
                self._set_marks(msg_id, set())
                del self._msgs[msg_id], self._marks[msg_id], self._seq[msg_id]
                deleted += 1
        return deleted

    async def _delete_by_mark(self, marks: list[str]) -> int:
        ids: dict[str, None] = {}
        for mark in marks:
            ids.update(self._by_mark.get(mark, {}))
        return await self._delete(list(ids))

    async def _update_marks(self, update: MarkUpdate) -> int:
        to_add, to_remove = set(update.add), set(update.remove)
        targets = list(self._msgs) if update.ids is None else update.ids
        found = 0
        for msg_id in targets:
            if msg_id not in self._msgs:
                continue
            found += 1
            self._set_marks(msg_id, (self._marks[msg_id] - to_remove) | to_add)
        return found

    async def _clear(self) -> None:
        self._msgs.clear()
        self._marks.clear()
        self._by_mark.clear()
        self._seq.clear()

    async def _get(self, query: GetQuery) -> list[Msg]:
        want, skip = query.marks, set(query.exclude_marks)
        if want:
            ids: set[str] = set()
            for mark in want:
                ids.update(self._by_mark.get(mark, {}))
            ordered: Iterable[str] = sorted(ids, key=self._seq.__getitem__)
        else:
            ordered = self._msgs
        if skip:
            ordered = [i for i in ordered if not (self._marks[i] & skip)]
        selected = list(ordered)
        if query.last_n is not None:
            selected = selected[-query.last_n :]
        return [self._msgs[i] for i in selected]

    async def _get_marks(self, msg_id: str) -> list[str] | None:
        marks = self._marks.get(msg_id)
        return None if marks is None else sorted(marks)

    async def _size(self) -> int:
        return len(self._msgs)


_new = object.__new__
_set = object.__setattr__


def _snapshot(msg: Msg) -> Msg:
    """A copy whose content list and metadata dict are the stored message's own.

    Later appends by the caller do not leak in; blocks themselves are shared (a deep copy
    costs ten times more and blocks are not mutated in place by the framework). Built as
    pydantic's ``__copy__`` builds a shallow copy, without its generic steps (a third of
    the cost of a batch ``add``).
    """
    state = msg.__dict__.copy()
    state["content"] = list(msg.content)
    state["metadata"] = dict(msg.metadata)
    snap = _new(type(msg))
    _set(snap, "__dict__", state)
    _set(snap, "__pydantic_fields_set__", set(msg.__pydantic_fields_set__))
    _set(snap, "__pydantic_extra__", None)  # Msg forbids extra fields
    private = msg.__pydantic_private__
    _set(snap, "__pydantic_private__", None if private is None else dict(private))
    return snap
