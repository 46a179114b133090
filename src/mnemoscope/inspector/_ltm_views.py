"""One interface over the long-term stores the memory pages show: native or mem0.

Example::

    view = long_term_view(LocalLongTermMemory("ltm.db"))    # or a Mem0LongTermMemory
    items = await view.memories("alice", limit=100, offset=0)
    await view.update(items[0].id, "Alice prefers oolong.", user_id="alice")

Every call is scoped to one user: a memory of another user is "not found", as in the
stores' own management calls (``get``/``list``/``update``/``delete``/``history``), which
the views use. Every item is a :class:`~mnemoscope.memory.MemoryItem`
(the native store's ``StoredMemoryItem`` adds ``status`` and ``superseded_by``) and every
history entry a :class:`~mnemoscope.memory.HistoryEntry`, whichever store they come from.

mem0 updates a memory in place: there is no separate superseding memory, and its history
(mem0's own ``history`` table) shows each text and the text that replaced it. That table
does not say whose a memory was, so a deleted mem0 memory is shown only to the user the
audit log says edited or deleted it through the page.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from abc import ABC, abstractmethod
from typing import Any

from mnemoscope.errors import UserError
from mnemoscope.memory import HistoryEntry, LocalLongTermMemory, Mem0LongTermMemory, MemoryItem


class LongTermViewBase(ABC):
    """What the memory pages need from a long-term store, scoped to one user."""

    kind: str
    """Shown on the pages: ``native store`` or ``mem0``."""
    order: str
    """How :meth:`memories` orders the memories, said on the page."""

    @abstractmethod
    async def get(self, memory_id: str, *, user_id: str) -> MemoryItem | None:
        """The user's memory (superseded and expired ones too), or ``None`` (unknown, or
        another user's)."""

    @abstractmethod
    async def deleted_owner(self, memory_id: str) -> str | None:
        """Whose a deleted memory was, if the store keeps that (``None``: unknown)."""

    @abstractmethod
    async def memories(self, user_id: str, *, limit: int, offset: int) -> list[MemoryItem]:
        """The user's memories, superseded ones included, in :attr:`order`."""

    @abstractmethod
    async def search(self, query: str, user_id: str, *, limit: int) -> list[MemoryItem]:
        """The store's own retrieval for ``query`` among the user's memories."""

    @abstractmethod
    async def history(
        self, memory_id: str, *, user_id: str, include_deleted: bool = False
    ) -> list[HistoryEntry]:
        """What happened to the user's memory, oldest first (empty for another user's).

        ``include_deleted``: the caller knows a memory that no longer exists was this
        user's (see :meth:`deleted_owner` and the audit log); show its history.
        """

    async def superseded_by(self, user_id: str, memory_id: str) -> list[MemoryItem]:
        """The user's memories that ``memory_id`` replaced (none for stores that update
        in place)."""
        return []

    async def check_editable(self) -> None:
        """Raise :class:`UserError` when an edit would lose something (e.g. a vector)."""

    @abstractmethod
    async def update(self, memory_id: str, content: str, *, user_id: str) -> MemoryItem:
        """Replace the text of the user's memory. Raises ``KeyError`` when it has none."""

    @abstractmethod
    async def delete(self, memory_id: str, *, user_id: str) -> bool:
        """Delete the user's memory; ``False`` when it has none."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close the store (only called for a store the inspector built)."""


class NativeLongTermView(LongTermViewBase):
    """:class:`~mnemoscope.memory.LocalLongTermMemory`: superseded memories and their
    links, history with the owner of every event. Its management calls take no user, so
    the view checks the owner of every memory it reads or changes."""

    kind = "native store"
    order = "oldest first"

    def __init__(self, store: LocalLongTermMemory) -> None:
        self.store = store

    async def get(self, memory_id: str, *, user_id: str) -> MemoryItem | None:
        item = await self.store.get(memory_id, include_expired=True)
        return item if item is not None and item.user_id == user_id else None

    async def deleted_owner(self, memory_id: str) -> str | None:
        path = self.store.path
        if path == ":memory:":
            return None
        return await asyncio.to_thread(_history_owner_sync, path, memory_id)

    async def memories(self, user_id: str, *, limit: int, offset: int) -> list[MemoryItem]:
        items = await self.store.list(
            user_id=user_id, include_superseded=True, limit=limit, offset=offset
        )
        return list(items)

    async def search(self, query: str, user_id: str, *, limit: int) -> list[MemoryItem]:
        return await self.store.retrieve(query, user_id=user_id, limit=limit)

    async def history(
        self, memory_id: str, *, user_id: str, include_deleted: bool = False
    ) -> list[HistoryEntry]:
        item = await self.store.get(memory_id, include_expired=True)
        if item is None:
            owner = await self.deleted_owner(memory_id)
            if owner != user_id and not (owner is None and include_deleted):
                return []
        elif item.user_id != user_id:
            return []
        return await self.store.history(memory_id)

    async def superseded_by(self, user_id: str, memory_id: str) -> list[MemoryItem]:
        everything = await self.store.list(
            user_id=user_id, include_superseded=True, include_expired=True
        )
        return [m for m in everything if m.superseded_by == memory_id]

    async def check_editable(self) -> None:
        stored = await self.store.stored_embedding()
        if self.store.embedding_model is None and stored:
            model, dims = stored
            raise UserError(
                f"this store holds vectors of {model!r} ({dims} dimensions) and the inspector "
                "has no embedding model, so an edited memory would lose its vector: start the "
                "inspector with that embedder (mnemoscope inspect --embedding ...)"
            )

    async def update(self, memory_id: str, content: str, *, user_id: str) -> MemoryItem:
        if await self.get(memory_id, user_id=user_id) is None:
            raise KeyError(memory_id)
        return await self.store.update(memory_id, content)

    async def delete(self, memory_id: str, *, user_id: str) -> bool:
        if await self.get(memory_id, user_id=user_id) is None:
            return False
        return await self.store.delete(memory_id)

    async def aclose(self) -> None:
        await self.store.aclose()


class Mem0LongTermView(LongTermViewBase):
    """A :class:`~mnemoscope.memory.Mem0LongTermMemory` over the open-source
    ``mem0.AsyncMemory``, through the store's own user-scoped management calls."""

    kind = "mem0"
    order = "in mem0's order"

    def __init__(self, store: Mem0LongTermMemory) -> None:
        if store.hosted:
            raise UserError(
                "the inspector shows a mem0 open-source store (mem0.AsyncMemory, e.g. a local "
                "Qdrant path); memories of the hosted mem0 Platform are in its own dashboard"
            )
        self.store = store

    async def get(self, memory_id: str, *, user_id: str) -> MemoryItem | None:
        return await self.store.get(memory_id, user_id=user_id, include_expired=True)

    async def deleted_owner(self, memory_id: str) -> str | None:
        return None  # mem0's history table has no user id

    async def memories(self, user_id: str, *, limit: int, offset: int) -> list[MemoryItem]:
        return await self.store.list(
            user_id=user_id, include_expired=True, limit=limit, offset=offset
        )

    async def search(self, query: str, user_id: str, *, limit: int) -> list[MemoryItem]:
        return await self.store.retrieve(query, user_id=user_id, limit=limit)

    async def history(
        self, memory_id: str, *, user_id: str, include_deleted: bool = False
    ) -> list[HistoryEntry]:
        return await self.store.history(memory_id, user_id=user_id, include_deleted=include_deleted)

    async def update(self, memory_id: str, content: str, *, user_id: str) -> MemoryItem:
        return await self.store.update(memory_id, content, user_id=user_id)

    async def delete(self, memory_id: str, *, user_id: str) -> bool:
        return await self.store.delete(memory_id, user_id=user_id)

    async def aclose(self) -> None:
        await self.store.aclose()


def long_term_view(store: Any) -> LongTermViewBase:
    """The view of a ``LocalLongTermMemory`` or a ``Mem0LongTermMemory``."""
    if isinstance(store, LocalLongTermMemory):
        return NativeLongTermView(store)
    if isinstance(store, Mem0LongTermMemory):  # the class imports without the mem0 extra
        return Mem0LongTermView(store)
    raise UserError(
        f"the long-term store must be a LocalLongTermMemory (ltm=) or a Mem0LongTermMemory "
        f"(mem0=), got {type(store).__name__}"
    )


def open_mem0(path: str | os.PathLike[str], embedding_model: Any) -> Any:
    """The ``Mem0LongTermMemory`` of a local Qdrant directory, to read and edit.

    Raises:
        UserError: no embedder given, or no such directory.
    """
    where = os.fspath(path)
    if embedding_model is None:
        raise UserError(
            f"mem0={where!r} needs embedding_model=, the embedder the store was written with "
            "(mnemoscope inspect --mem0 DIR --embedding local|hash)"
        )
    if not os.path.isdir(where):
        raise UserError(
            f"no mem0 store at {where!r}: give the local Qdrant directory (path=) of the "
            "agent's Mem0LongTermMemory"
        )
    from mnemoscope.testing import ScriptedChatModel

    # mem0 asks its chat model only to extract facts from new messages, and the inspector
    # records none: this model has nothing to say and fails if it is ever called
    return Mem0LongTermMemory(
        chat_model=ScriptedChatModel(), embedding_model=embedding_model, path=where
    )


def _history_owner_sync(path: str, memory_id: str) -> str | None:
    # the documented ltm_history table of the native store, opened read-only
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute(
            "SELECT user_id FROM ltm_history WHERE memory_id = ? LIMIT 1", (memory_id,)
        ).fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return None if row is None else str(row[0])
