"""A narrow protocol for third-party session stores, and the adapter that makes one a
:class:`MemoryBase`.

:class:`MemoryBase` has eleven methods with exact semantics (duplicates, mark filters,
atomic batches). A store someone else owns (a document database, an existing chat-log
table, a key-value service) should not have to get all of them right. It implements the
three operations of :class:`SessionStore` instead, and :class:`SessionStoreMemory` gives
the agent the whole :class:`MemoryBase` on top of them, with the same behaviour as the
built-in backends (it passes the same contract tests)::

    class MyStore:                      # no base class needed: the protocol is structural
        async def load(self, user_id, session_id): ...       # -> list of StoredMsg
        async def append(self, user_id, session_id, entries): ...
        async def rewrite(self, user_id, session_id, entries): ...

    memory = SessionStoreMemory(MyStore(), user_id="alice", session_id="s1")
    agent = Agent(..., memory=memory)

Every operation reads the session (``load``), applies the change to a working copy with
:class:`InMemoryMemory`'s code, then writes back: ``append`` when the change only adds new
messages (the common case: each turn of a conversation), ``rewrite`` of the whole session
otherwise (a delete, a mark change, a replaced message). That costs O(session) per
call, which suits sessions of thousands of messages; a store that needs better can
subclass :class:`MemoryBase` directly, as the built-in backends do.

Concurrency: in one process, every adapter over the same store object and session takes
turns (one lock per store and session), so a ``clear`` racing an ``update_marks`` cannot
bring a cleared message back. Across processes the read-change-write of a delete or a
mark change is not atomic: two such changes at the same moment can lose one. Appends
(every new turn) are as safe as the store's ``append``. Sessions that several processes
change at once belong in :class:`RedisMemory` or :class:`AsyncSQLAlchemyMemory`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import pydantic

from mnemoscope.errors import MemoryStoreError, MnemoscopeError, UserError
from mnemoscope.memory._base import (
    AddRequest,
    GetQuery,
    MarkUpdate,
    MemoryBase,
    OnCorrupt,
    StoredMsg,
)
from mnemoscope.memory._in_memory import InMemoryMemory
from mnemoscope.message import Msg

_T = TypeVar("_T")


@runtime_checkable
class SessionStore(Protocol):
    """The three operations a third-party session store implements.

    A session is named by ``(user_id, session_id)``; sessions never see each other.
    Entries are :class:`StoredMsg` (a message and its marks); ``load`` may also return
    their JSON form (``entry.model_dump(mode="json")``, e.g. straight from a document
    database), which is validated on the way in.
    """

    async def load(self, user_id: str, session_id: str) -> Sequence[StoredMsg | Mapping[str, Any]]:
        """Every entry of the session, oldest first (``[]`` for a session never written)."""
        ...

    async def append(self, user_id: str, session_id: str, entries: Sequence[StoredMsg]) -> None:
        """Add ``entries`` at the end of the session, in order, all or none."""
        ...

    async def rewrite(self, user_id: str, session_id: str, entries: Sequence[StoredMsg]) -> None:
        """Replace the whole session by ``entries`` (``[]`` empties it), all or none."""
        ...


class SessionStoreMemory(MemoryBase):
    """A :class:`MemoryBase` over any :class:`SessionStore`.

    Args:
        store: the store; it stays the caller's (``aclose`` does not close it).
        user_id: whose session this is.
        session_id: which session of that user.

    Raises:
        UserError: ``store`` lacks one of ``load``, ``append``, ``rewrite``.

    A store that raises becomes a :class:`MemoryStoreError` naming the store and the
    operation; what it held before is left as the store left it (untouched, when its
    writes are atomic as the protocol asks). Entries ``load`` returns that are not valid
    are skipped with a warning (``on_corrupt="raise"``: a ``CorruptRecordError``), and a
    change that would rewrite the session refuses to run while they are there, so that
    it cannot drop them.
    """

    def __init__(
        self, store: SessionStore, *, user_id: str = "default", session_id: str = "default"
    ) -> None:
        if not isinstance(store, SessionStore):
            missing = [n for n in ("load", "append", "rewrite") if not hasattr(store, n)]
            raise UserError(
                f"SessionStoreMemory needs a SessionStore, but {type(store).__name__} lacks "
                f"{', '.join(missing)}; implement async load(user_id, session_id), "
                "append(user_id, session_id, entries) and rewrite(user_id, session_id, "
                "entries) (see mnemoscope.memory.SessionStore)"
            )
        super().__init__(user_id=user_id, session_id=session_id)
        self.store = store
        self._own_lock: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return (
            f"SessionStoreMemory({type(self.store).__name__}, user_id={self.user_id!r}, "
            f"session_id={self.session_id!r})"
        )

    # ------------------------------------------------------------------ plumbing
    @property
    def _lock(self) -> asyncio.Lock:
        """The lock of this store and session, shared by every adapter over them."""
        loop = asyncio.get_running_loop()
        try:
            locks = _LOCKS.setdefault(self.store, {})
        except TypeError:  # a store that cannot be weakly referenced: a lock of our own
            if self._own_lock is None:
                self._own_lock = asyncio.Lock()
            return self._own_lock
        key = (self.user_id, self.session_id)
        held = locks.get(key)
        if held is None or held[0]() is not loop:  # locks belong to one event loop
            held = (weakref.ref(loop), asyncio.Lock())
            locks[key] = held
        return held[1]

    async def _call(self, what: str, call: Callable[[], Awaitable[_T]]) -> _T:
        try:
            return await call()
        except MnemoscopeError:
            raise
        except Exception as exc:
            raise MemoryStoreError(
                f"the session store {type(self.store).__name__} failed to {what} for "
                f"session {self.user_id}/{self.session_id}: {type(exc).__name__}: {exc}"
            ) from exc

    async def _working_copy(
        self, on_corrupt: OnCorrupt = "skip"
    ) -> tuple[InMemoryMemory, list[str]]:
        """The session in an :class:`InMemoryMemory`, and the ids of entries that were
        not valid (skipped)."""
        raw = await self._call("load", lambda: self.store.load(self.user_id, self.session_id))
        entries: list[StoredMsg] = []
        corrupt: list[str] = []
        for position, item in enumerate(raw):
            try:
                entries.append(
                    item if isinstance(item, StoredMsg) else StoredMsg.model_validate(item)
                )
            except pydantic.ValidationError as exc:
                record_id = _record_id(item, position)
                corrupt.append(record_id)
                self._report_corrupt(record_id, _short(exc), on_corrupt)
        copy = InMemoryMemory(user_id=self.user_id, session_id=self.session_id)
        if entries:
            await copy.add(
                [e.msg for e in entries],
                {e.msg.id: e.marks for e in entries},
                on_duplicate="replace",
            )
        return copy, corrupt

    async def _rewrite(self, copy: InMemoryMemory, corrupt: list[str], what: str) -> None:
        if corrupt:
            raise MemoryStoreError(
                f"cannot {what} in session {self.user_id}/{self.session_id}: the store "
                f"holds {len(corrupt)} entries that are not valid (first: {corrupt[0]!r}), "
                "and rewriting the session would drop them; repair or remove them in the "
                "store first. Nothing was changed."
            )
        entries = (await copy.export_state()).messages
        await self._call(what, lambda: self.store.rewrite(self.user_id, self.session_id, entries))

    # ------------------------------------------------------------------ writing
    async def _add(self, request: AddRequest) -> int:
        async with self._lock:
            copy, corrupt = await self._working_copy()
            before = {m.id for m in await copy.get()}
            added = await copy._add(request)
            replaced = request.on_duplicate == "replace" and any(
                m.id in before for m in request.msgs
            )
            if replaced:
                await self._rewrite(copy, corrupt, "replace messages")
            elif added:
                new = [m for m in await copy.get() if m.id not in before]
                entries = [StoredMsg(msg=m, marks=await copy.get_marks(m.id) or []) for m in new]
                await self._call(
                    f"append {len(entries)} messages",
                    lambda: self.store.append(self.user_id, self.session_id, entries),
                )
            return added

    async def _delete(self, ids: list[str]) -> int:
        return await self._delete_in_copy(lambda copy: copy._delete(ids))

    async def _delete_by_mark(self, marks: list[str]) -> int:
        return await self._delete_in_copy(lambda copy: copy._delete_by_mark(marks))

    async def _delete_in_copy(self, delete: Callable[[InMemoryMemory], Awaitable[int]]) -> int:
        """Run ``delete`` on a working copy of the session, under the lock; the store is
        rewritten only when it removed something."""
        async with self._lock:
            copy, corrupt = await self._working_copy()
            deleted = await delete(copy)
            if deleted:
                await self._rewrite(copy, corrupt, "delete messages")
            return deleted

    async def _update_marks(self, update: MarkUpdate) -> int:
        async with self._lock:
            copy, corrupt = await self._working_copy()
            before = (await copy.export_state()).messages
            found = await copy._update_marks(update)
            if (await copy.export_state()).messages != before:
                await self._rewrite(copy, corrupt, "change marks")
            return found

    async def _clear(self) -> None:
        async with self._lock:
            await self._call("clear", lambda: self.store.rewrite(self.user_id, self.session_id, []))

    # ------------------------------------------------------------------ reading
    async def _get(self, query: GetQuery) -> list[Msg]:
        copy, _corrupt = await self._working_copy(query.on_corrupt)
        return await copy._get(query)

    async def _get_marks(self, msg_id: str) -> list[str] | None:
        copy, _corrupt = await self._working_copy()
        return await copy.get_marks(msg_id)

    async def _size(self) -> int:
        copy, _corrupt = await self._working_copy()
        return await copy.size()


_LOCKS: weakref.WeakKeyDictionary[
    object, dict[tuple[str, str], tuple[weakref.ref[asyncio.AbstractEventLoop], asyncio.Lock]]
] = weakref.WeakKeyDictionary()


def _record_id(item: object, position: int) -> str:
    if isinstance(item, Mapping):
        msg = item.get("msg")
        if isinstance(msg, Mapping) and isinstance(msg.get("id"), str):
            return str(msg["id"])
    return f"entry #{position}"


def _short(exc: pydantic.ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "entry"
    return f"{where}: {first.get('msg', 'invalid')}"


__all__ = ["SessionStore", "SessionStoreMemory"]
