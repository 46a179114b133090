"""Management calls of :class:`~mnemoscope.memory.Mem0LongTermMemory`, and mem0's rows as ours.

Example::

    items = await store.list(user_id="alice", limit=50)
    item = await store.get(items[0].id, user_id="alice")
    await store.update(item.id, "Alice prefers oolong.", user_id="alice")
    for entry in await store.history(item.id, user_id="alice"):
        print(entry.at, entry.event, entry.old_content, "->", entry.new_content)
    await store.delete(item.id, user_id="alice")

The calls have the names, arguments and return types of the native store's
(:class:`~mnemoscope.memory.LocalLongTermMemory`: ``list``, ``get``, ``update``,
``delete``, ``history``), plus a required ``user_id``: every call is scoped to one user. A
memory of another user is "not found" (``None``, ``[]``, ``False``, ``KeyError``), exactly
like an id that does not exist, so a caller cannot even learn that it exists.

They run on the open-source ``mem0.AsyncMemory`` only. The hosted Platform's
``AsyncMemoryClient`` pages, filters and reports its rows differently and cannot be tested
offline here, so these calls raise :class:`~mnemoscope.errors.UserError` on a hosted store;
manage those memories in the Platform dashboard or with the client itself.

mem0 updates a memory in place (there is no superseding memory) and its ``history`` table
records no owner. A memory that still exists is checked against ``user_id`` through its
own payload; once it is deleted, nobody can say whose it was, so its history is "not
found" unless the caller, having established ownership another way, asks for it with
``include_deleted=True``.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Awaitable
from datetime import UTC, date, datetime
from typing import Any, Literal, TypeVar

from mnemoscope._redact import redact_text
from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory._long_term_base import MemoryItem, MemoryScope, call_scope
from mnemoscope.memory._ltm_schema import HistoryEntry

_T = TypeVar("_T")

_HISTORY_EVENTS: dict[str, Literal["add", "update", "delete"]] = {
    "ADD": "add",
    "UPDATE": "update",
    "DELETE": "delete",
}

_FIRST_PAGE = 100
"""Rows asked of mem0 by the first ``get_all`` of an unlimited :meth:`Mem0Management.list`."""


class Mem0Management:
    """What :class:`~mnemoscope.memory.Mem0LongTermMemory` offers beyond
    ``record``/``retrieve`` (see the module docstring).

    The store provides ``client``, ``hosted`` and ``_check_open``.
    """

    client: Any
    hosted: bool

    def _check_open(self) -> None:  # pragma: no cover - the store overrides it
        raise NotImplementedError

    # ------------------------------------------------------------------ reading
    async def list(
        self,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        include_expired: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> builtins.list[MemoryItem]:
        """The memories of a scope, in mem0's order (stable; by id for Qdrant).

        Args:
            include_expired: also return memories whose ``expiration_date`` has passed.
            limit: at most this many; ``None`` returns them all.
            offset: skip this many first (with ``limit``, a page).
        """
        self._usable("list", user_id)
        if (limit is not None and limit < 0) or offset < 0:
            raise UserError(f"limit and offset must be >= 0, got limit={limit}, offset={offset}")
        if limit == 0:
            return []
        filters = scope_ids(call_scope(user_id, agent_id, run_id))
        # ask with show_expired=True so that mem0 returns exactly the rows asked for, and
        # tell expired ones apart here: a short answer then means there are no more rows
        wanted = _FIRST_PAGE if limit is None else offset + limit
        while True:
            response = await self._call(
                "get_all", self.client.get_all(filters=filters, top_k=wanted, show_expired=True)
            )
            rows = response.get("results", []) if isinstance(response, dict) else response or []
            if limit is not None or len(rows) < wanted:
                break
            wanted *= 2
        kept = [r for r in rows if isinstance(r, dict) and (include_expired or not _expired(r))]
        end = None if limit is None else offset + limit
        return [item_from_row(r) for r in kept[offset:end]]

    async def get(
        self, memory_id: str, *, user_id: str, include_expired: bool = False
    ) -> MemoryItem | None:
        """The user's memory ``memory_id``, or ``None`` (unknown, or another user's)."""
        self._usable("get", user_id)
        row = await self._owned_row(memory_id, user_id)
        if row is None or (not include_expired and _expired(row)):
            return None
        return item_from_row(row)

    async def history(
        self, memory_id: str, *, user_id: str, include_deleted: bool = False
    ) -> builtins.list[HistoryEntry]:
        """Everything mem0 recorded about the user's memory, oldest first.

        Empty when the memory is unknown or another user's. mem0's history records no
        owner, so a deleted memory's history is empty too, unless ``include_deleted``.

        Args:
            include_deleted: also return the history of a memory that no longer exists.
                It cannot be checked against ``user_id``: pass ``True`` only when you know
                by other means that it was this user's (the inspector: its audit log says
                the user edited or deleted it). A memory that exists is always checked.
        """
        self._usable("history", user_id)
        if not _is_uuid(memory_id):
            return []
        row = await self._call("get", self.client.get(memory_id))
        if row is None and not include_deleted:
            return []
        if row is not None and row.get("user_id") != user_id:
            return []
        rows = await self._call("history", self.client.history(memory_id))
        return [history_from_row(memory_id, r) for r in rows or [] if isinstance(r, dict)]

    # ------------------------------------------------------------------ writing
    async def update(
        self,
        memory_id: str,
        content: str,
        *,
        user_id: str,
        metadata: dict[str, Any] | None = None,
    ) -> MemoryItem:
        """Replace the text of the user's memory (mem0 re-embeds it; the old text stays in
        mem0's history).

        Args:
            metadata: keys to set in the memory's metadata. mem0 merges them into what is
                there (keys not named are kept), unlike the native store, which replaces.

        Raises:
            KeyError: no memory of this user has this id.
            UserError: ``content`` is empty.
        """
        self._usable("update", user_id)
        text = content.strip()
        if not text:
            raise UserError("update() needs a non-empty content; use delete() to remove a memory")
        if await self._owned_row(memory_id, user_id) is None:
            raise KeyError(memory_id)
        kwargs: dict[str, Any] = {"text": text}
        if metadata is not None:
            kwargs["metadata"] = dict(metadata)
        try:
            await self.client.update(memory_id, **kwargs)
        except Exception as exc:
            if await self._owned_row(memory_id, user_id) is None:  # deleted meanwhile
                raise KeyError(memory_id) from None
            raise _store_error("update", exc) from exc
        row = await self._owned_row(memory_id, user_id)
        if row is None:  # deleted right after our update
            raise KeyError(memory_id)
        return item_from_row(row)

    async def delete(self, memory_id: str, *, user_id: str) -> bool:
        """Delete the user's memory (mem0's history keeps a ``DELETE`` entry).

        Returns:
            ``False`` when no memory of this user has this id (nothing is deleted).
        """
        self._usable("delete", user_id)
        if await self._owned_row(memory_id, user_id) is None:
            return False
        try:
            await self.client.delete(memory_id)
        except Exception as exc:
            if await self._owned_row(memory_id, user_id) is None:  # deleted meanwhile
                return False
            raise _store_error("delete", exc) from exc
        return True

    # ----------------------------------------------------------------- helpers
    def _usable(self, what: str, user_id: str) -> None:
        self._check_open()
        if self.hosted:
            raise UserError(
                f"Mem0LongTermMemory.{what}() works on the open-source mem0.AsyncMemory; this "
                "store uses the hosted mem0 Platform (AsyncMemoryClient), whose memories are "
                "managed in the Platform dashboard or with the client's own methods"
            )
        if not isinstance(user_id, str) or not user_id.strip():
            raise UserError(f"{what}() needs a non-empty user_id, got {user_id!r}")

    async def _owned_row(self, memory_id: str, user_id: str) -> dict[str, Any] | None:
        """mem0's row of ``memory_id`` if it belongs to ``user_id``, else ``None``."""
        if not _is_uuid(memory_id):  # mem0's ids are UUIDs; Qdrant rejects anything else
            return None
        row = await self._call("get", self.client.get(memory_id))
        if not isinstance(row, dict) or row.get("user_id") != user_id:
            return None
        return row

    async def _call(self, what: str, awaitable: Awaitable[_T]) -> _T:
        try:
            return await awaitable
        except Exception as exc:  # mem0 raises plain exceptions: say which call failed
            raise _store_error(what, exc) from exc


# ------------------------------------------------------------------- conversion
def scope_ids(scope: MemoryScope) -> dict[str, str]:
    """The ids of ``scope`` that are set, as mem0's ``add``, ``search`` and ``get_all``
    take them."""
    ids = {"user_id": scope.user_id, "agent_id": scope.agent_id, "run_id": scope.run_id}
    return {k: v for k, v in ids.items() if v is not None}


def item_from_row(row: dict[str, Any]) -> MemoryItem:
    """A :class:`MemoryItem` from one of mem0's memory rows (``get``, ``get_all``,
    ``search`` or an ``add`` event), open-source or hosted."""
    metadata = dict(row.get("metadata") or {})
    for key in ("actor_id", "role", "attributed_to", "hash", "categories", "expiration_date"):
        if row.get(key) is not None:
            metadata.setdefault(key, row[key])
    return MemoryItem(
        id=str(row.get("id", "")),
        content=str(row.get("memory") or row.get("text") or row.get("data") or ""),
        score=row.get("score"),
        user_id=row.get("user_id"),
        agent_id=row.get("agent_id"),
        run_id=row.get("run_id"),
        metadata=metadata,
        created_at=parse_time(row.get("created_at")),
        updated_at=parse_time(row.get("updated_at")),
    )


def history_from_row(memory_id: str, row: dict[str, Any]) -> HistoryEntry:
    """A :class:`HistoryEntry` from one row of mem0's ``history`` table.

    mem0 writes ``ADD``, ``UPDATE`` and ``DELETE``; another event is kept as an ``update``
    whose ``reason`` names it. A row without a time is dated 1970-01-01 UTC (so it sorts
    first and is visibly undated) rather than dropped.
    """
    raw = str(row.get("event", "")).upper()
    event = _HISTORY_EVENTS.get(raw)
    at = parse_time(row.get("updated_at")) or parse_time(row.get("created_at"))
    return HistoryEntry(
        memory_id=memory_id,
        event=event or "update",
        old_content=row.get("old_memory"),
        new_content=row.get("new_memory"),
        reason=None if event is not None else f"mem0 event {raw or '(none)'}",
        at=at or datetime.fromtimestamp(0, UTC),
    )


def parse_time(value: Any) -> datetime | None:
    """mem0's ISO-8601 times, in UTC (mem0 may write local times with an offset; a time
    without one is taken as UTC). ``None`` when absent or unreadable."""
    if isinstance(value, datetime):
        at = value
    elif isinstance(value, str) and value:
        try:
            at = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)


def _expired(row: dict[str, Any]) -> bool:
    # mem0's own rule: an expiration_date (YYYY-MM-DD) before today, in UTC
    value = row.get("expiration_date")
    if not value:
        return False
    try:
        return date.fromisoformat(str(value)) < datetime.now(UTC).date()
    except ValueError:
        return False


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (TypeError, ValueError):
        return False
    return True


def _store_error(what: str, exc: BaseException) -> MemoryStoreError:
    return MemoryStoreError(redact_text(f"mem0 {what} failed: {type(exc).__name__}: {exc}"))
