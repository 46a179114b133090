"""The short-term memory contract (session stores of :class:`~mnemoscope.message.Msg`).

Every backend is scoped by ``user_id`` and ``session_id`` and keeps, per message, its
JSON (exactly ``Msg.model_dump_json()``) and a set of *marks*: short labels such as
``"hint"``, ``"summary"``, ``"tool_result"`` or your own, indexed so that filtering by
mark never scans message JSON.

Semantics shared by all backends (the contract suite in ``tests/memory`` checks them):

* insertion order is the order of :meth:`MemoryBase.add` calls, and within one call the
  order of the list; a batch is stored atomically (all or nothing), marks included;
* ``add(msgs, marks)`` gives every message of the batch the same marks, or, with a mapping
  ``{msg_id: marks}``, each message its own (a message missing from the mapping gets none):
  a tool result and its ``"tool_result"`` mark are then one atomic write;
* adding an id that is already stored follows ``on_duplicate``: ``"ignore"`` (default)
  keeps the stored message, ``"replace"`` overwrites content and marks in place (keeping
  its position), ``"error"`` raises :class:`~mnemoscope.errors.MemoryStoreError` and
  stores nothing of that batch;
* ``marks=`` filters keep messages carrying *any* of the marks; ``exclude_marks=`` drops
  messages carrying any of them;
* a message that cannot be stored as JSON (a text with a lone surrogate such as ``'\\udcff'``,
  metadata holding an object JSON does not know) is refused by :meth:`MemoryBase.add` with
  :class:`~mnemoscope.errors.ValidationError` naming the message and the field, before
  anything of the batch is written (:func:`dump_msg`);
* a stored row that cannot be decoded is skipped by :meth:`get`, logged at WARNING with
  its id and listed in :attr:`MemoryBase.corrupt_records`; ``on_corrupt="raise"`` raises
  :class:`~mnemoscope.errors.CorruptRecordError` instead.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

from pydantic import BaseModel, Field

from mnemoscope.errors import CorruptRecordError, UserError
from mnemoscope.memory._msg_json import decode_one, decode_rows, dump_msg
from mnemoscope.message import Msg

logger = logging.getLogger("mnemoscope.memory")

Marks = str | Sequence[str] | None
AddMarks = Marks | Mapping[str, Marks]
"""What :meth:`MemoryBase.add` takes as ``marks``: marks for every message of the batch, or
a mapping ``msg_id -> marks`` giving each message its own."""
OnDuplicate = Literal["ignore", "replace", "error"]
OnCorrupt = Literal["skip", "raise"]

STATE_VERSION = 1


class StoredMsg(BaseModel):
    """One exported entry: the message and its marks."""

    msg: Msg
    marks: list[str] = Field(default_factory=list)


class MemoryState(BaseModel):
    """A whole session, as produced by :meth:`MemoryBase.export_state`."""

    version: int = STATE_VERSION
    user_id: str
    session_id: str
    messages: list[StoredMsg] = Field(default_factory=list)


def normalize_marks(marks: Marks) -> list[str]:
    """``None`` -> ``[]``, ``"a"`` -> ``["a"]``; validates every mark is a non-empty str."""
    if marks is None:
        return []
    items = [marks] if isinstance(marks, str) else list(marks)
    for m in items:
        if not isinstance(m, str) or not m:
            raise UserError(f"a mark must be a non-empty string, got {m!r}")
    return list(dict.fromkeys(items))


def normalize_msgs(msgs: Msg | Sequence[Msg] | None) -> list[Msg]:
    if msgs is None:
        return []
    items = [msgs] if isinstance(msgs, Msg) else list(msgs)
    for m in items:
        if not isinstance(m, Msg):
            raise UserError(f"memory.add() takes Msg objects, got {type(m).__name__}")
    return items


ON_DUPLICATE_CHOICES = ("ignore", "replace", "error")


def check_on_duplicate(on_duplicate: str) -> None:
    """Raise a clear error for an unknown ``on_duplicate`` value."""
    if on_duplicate not in ON_DUPLICATE_CHOICES:
        raise UserError(
            f"on_duplicate must be 'ignore', 'replace' or 'error', got {on_duplicate!r}"
        )


MarkPlan = list[str] | dict[str, list[str]]
"""Normalised ``marks`` of an add: one list for every message, or ``msg_id -> marks`` for
the messages that have some (:func:`plan_marks`)."""


def plan_marks(marks: AddMarks, items: Sequence[Msg]) -> MarkPlan:
    """Normalise the ``marks`` argument of :meth:`MemoryBase.add` for the batch ``items``.

    Raises:
        UserError: a mark that is not a non-empty string, or a mapping naming an id that is
            not in the batch (a typo would otherwise drop the mark silently).
    """
    if not isinstance(marks, Mapping):
        return normalize_marks(marks)
    ids = {m.id for m in items}
    plan: dict[str, list[str]] = {}
    for msg_id, msg_marks in marks.items():
        if msg_id not in ids:
            raise UserError(
                f"add(): marks names message id {msg_id!r}, which is not in this add; "
                "key the mapping by the id of a message of the batch (msg.id)"
            )
        names = normalize_marks(msg_marks)
        if names:
            plan[msg_id] = names
    return plan


def marks_of(plan: MarkPlan, msg_id: str) -> list[str]:
    """The marks ``plan`` gives the message ``msg_id``."""
    return plan if isinstance(plan, list) else plan.get(msg_id, [])


def mark_pairs(plan: MarkPlan, ids: Iterable[str]) -> list[tuple[str, str]]:
    """``(msg_id, mark)`` of every mark ``plan`` gives the messages ``ids``."""
    if isinstance(plan, list):
        return [(i, m) for i in ids for m in plan]
    return [(i, m) for i in ids for m in plan.get(i, ())]


def normalize_ids(ids: str | Iterable[str]) -> list[str]:
    return [ids] if isinstance(ids, str) else list(ids)


class AsyncResource:
    """What every store does to end: ``aclose()``, its other spelling ``close()``, and
    ``async with store: ...``, which closes on the way out. Subclasses override
    :meth:`aclose`."""

    async def aclose(self) -> None:
        """Release what this object created. Safe to call twice."""

    async def close(self) -> None:
        """The same as :meth:`aclose`: every mnemoscope resource answers to both spellings."""
        await self.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@dataclass(frozen=True, slots=True)
class AddRequest:
    """A validated :meth:`MemoryBase.add`, as :meth:`MemoryBase._add` receives it.

    Attributes:
        msgs: the messages, in batch order (never empty).
        docs: ``msg.model_dump_json()`` of each, in the same order: what a backend stores.
            Every message was serialised before the hook runs, so a message JSON cannot
            hold has already been refused and nothing of the batch was written.
        marks: one list of marks for every message, or ``msg_id -> marks`` for the
            messages that have some (:func:`marks_of` answers for one id).
        on_duplicate: ``"ignore"``, ``"replace"`` or ``"error"`` (see :class:`MemoryBase`).
    """

    msgs: list[Msg]
    docs: list[str]
    marks: MarkPlan
    on_duplicate: OnDuplicate

    @property
    def payload(self) -> list[tuple[str, str]]:
        """``(msg_id, JSON)`` of each message, in batch order."""
        return [(m.id, d) for m, d in zip(self.msgs, self.docs, strict=True)]

    def marks_of(self, msg_id: str) -> list[str]:
        """The marks this add gives the message ``msg_id``."""
        return marks_of(self.marks, msg_id)


@dataclass(frozen=True, slots=True)
class GetQuery:
    """A validated :meth:`MemoryBase.get`, as :meth:`MemoryBase._get` receives it.

    Attributes:
        last_n: keep only the newest ``last_n`` after filtering (always positive), or
            ``None`` for all.
        marks: keep messages carrying any of these (``[]``: no filter).
        exclude_marks: drop messages carrying any of these.
        on_corrupt: what to do with a stored row that cannot be decoded; pass it to
            :meth:`MemoryBase._decode`, which reports such rows.
    """

    last_n: int | None
    marks: list[str]
    exclude_marks: list[str]
    on_corrupt: OnCorrupt


@dataclass(frozen=True, slots=True)
class MarkUpdate:
    """A validated :meth:`MemoryBase.update_marks`, as :meth:`MemoryBase._update_marks`
    receives it.

    Attributes:
        ids: the messages to change (distinct, never empty), or ``None`` for every message.
        add: marks to add.
        remove: marks to remove (a mark in both ends up present).
    """

    ids: list[str] | None
    add: list[str]
    remove: list[str]


class MemoryBase(AsyncResource, ABC):
    """Async session store of messages with marks.

    The public methods validate their arguments and call one protected hook each; a
    backend implements the eight hooks (``_add``, ``_get``, ``_get_marks``, ``_size``,
    ``_delete``, ``_delete_by_mark``, ``_update_marks``, ``_clear``), which receive
    normalised arguments and are not called for requests that change nothing (an empty
    batch, an empty id list). Everything else (export, import, the AgentScope aliases)
    is written once here on top of the public methods.

    Args:
        user_id: whose session this is.
        session_id: which session of that user.
    """

    def __init__(self, *, user_id: str = "default", session_id: str = "default") -> None:
        for name, value in (("user_id", user_id), ("session_id", session_id)):
            if not isinstance(value, str) or not value:
                raise UserError(f"{name} must be a non-empty string, got {value!r}")
        self.user_id = user_id
        self.session_id = session_id
        self.corrupt_records: list[CorruptRecordError] = []

    # ------------------------------------------------------------------ writing
    async def add(
        self,
        msgs: Msg | Sequence[Msg] | None,
        marks: AddMarks = None,
        *,
        on_duplicate: OnDuplicate = "ignore",
    ) -> int:
        """Store one or many messages atomically; returns how many were newly stored.

        Args:
            msgs: one message or a list, stored in list order.
            marks: marks for every message (``"hint"``, ``["a", "b"]``), or a mapping
                ``{msg.id: marks}`` giving each message of the batch its own; messages and
                marks are one atomic write either way. With ``on_duplicate="replace"`` a
                replaced message gets exactly the marks of this call.
            on_duplicate: what to do with ids already stored (see :class:`MemoryBase`).

        Example:
            ``await memory.add([step, result], marks={result.id: "tool_result"})``

        Raises:
            UserError: ``marks`` names an id not in the batch, or a mark is not a
                non-empty string.
            ValidationError: a message cannot be stored as JSON (nothing is stored).
        """
        check_on_duplicate(on_duplicate)
        items = [msgs] if isinstance(msgs, Msg) else normalize_msgs(msgs)
        plan = plan_marks(marks, items)
        if not items:
            return 0
        docs = [dump_msg(m) for m in items]  # all validated before anything is written
        return await self._add(AddRequest(items, docs, plan, on_duplicate))

    async def delete(self, ids: str | Iterable[str]) -> int:
        """Delete messages by id; returns how many were deleted."""
        id_list = list(dict.fromkeys(normalize_ids(ids)))
        return await self._delete(id_list) if id_list else 0

    async def delete_by_mark(self, marks: Marks) -> int:
        """Delete every message carrying any of ``marks``; returns how many."""
        mark_list = normalize_marks(marks)
        return await self._delete_by_mark(mark_list) if mark_list else 0

    async def update_marks(
        self,
        ids: str | Iterable[str] | None = None,
        *,
        add: Marks = None,
        remove: Marks = None,
    ) -> int:
        """Add and/or remove marks on messages (``ids=None``: every message).

        Returns how many messages exist among ``ids`` (changed or not).
        """
        to_add, to_remove = normalize_marks(add), normalize_marks(remove)
        id_list = None if ids is None else list(dict.fromkeys(normalize_ids(ids)))
        if id_list == []:
            return 0
        return await self._update_marks(MarkUpdate(id_list, to_add, to_remove))

    async def clear(self) -> None:
        """Delete the whole session."""
        await self._clear()

    # ------------------------------------------------------------------ reading
    async def get(
        self,
        *,
        last_n: int | None = None,
        marks: Marks = None,
        exclude_marks: Marks = None,
        on_corrupt: OnCorrupt = "skip",
    ) -> list[Msg]:
        """Messages in insertion order, optionally only the last ``last_n`` after filtering."""
        want, skip = normalize_marks(marks), normalize_marks(exclude_marks)
        if last_n is not None and last_n <= 0:
            return []
        return await self._get(GetQuery(last_n, want, skip, on_corrupt))

    async def get_marks(self, msg_id: str) -> list[str] | None:
        """The marks of one message, or ``None`` when it is not stored."""
        return await self._get_marks(msg_id)

    async def size(self) -> int:
        """Number of stored messages."""
        return await self._size()

    # --------------------------------------------------------- backend hooks
    @abstractmethod
    async def _add(self, request: AddRequest) -> int:
        """Store ``request.docs`` atomically (all or nothing, marks included), following
        ``request.on_duplicate``; how many messages were new. ``"error"`` raises
        :class:`~mnemoscope.errors.MemoryStoreError` naming the stored ids."""

    @abstractmethod
    async def _get(self, query: GetQuery) -> list[Msg]:
        """The messages ``query`` selects, oldest first."""

    @abstractmethod
    async def _get_marks(self, msg_id: str) -> list[str] | None:
        """The sorted marks of ``msg_id``, ``None`` when it is not stored."""

    @abstractmethod
    async def _size(self) -> int:
        """Number of stored messages."""

    @abstractmethod
    async def _delete(self, ids: list[str]) -> int:
        """Delete ``ids`` (distinct, never empty) and their marks; how many were stored."""

    @abstractmethod
    async def _delete_by_mark(self, marks: list[str]) -> int:
        """Delete every message carrying any of ``marks`` (never empty); how many."""

    @abstractmethod
    async def _update_marks(self, update: MarkUpdate) -> int:
        """Apply ``update``; how many of its messages are stored (changed or not)."""

    @abstractmethod
    async def _clear(self) -> None:
        """Delete the whole session."""

    # ------------------------------------------------------------ whole session
    async def export_state(self) -> MemoryState:
        """The whole session (messages with their marks) as one document."""
        rows = await self._export_rows()
        if rows is None:
            msgs = await self.get(on_corrupt="raise")
            entries = [StoredMsg(msg=m, marks=await self.get_marks(m.id) or []) for m in msgs]
        else:
            entries = []
            for msg_id, doc, marks in rows:
                msg = decode_one(self, msg_id, doc, "raise")
                assert msg is not None  # on_corrupt="raise" never returns None
                entries.append(StoredMsg(msg=msg, marks=marks))
        return MemoryState(user_id=self.user_id, session_id=self.session_id, messages=entries)

    async def _export_rows(self) -> list[tuple[Any, Any, list[str]]] | None:
        """Optional hook: every stored message as ``(msg_id, stored JSON, sorted marks)``,
        oldest first, read at once (one round trip, one snapshot). ``None`` (the default):
        :meth:`export_state` reads through :meth:`get` and :meth:`get_marks`."""
        return None

    async def import_state(
        self, state: MemoryState | dict[str, Any], *, replace: bool = True
    ) -> None:
        """Load a session exported by :meth:`export_state` (any backend's).

        With ``replace=True`` the current session is cleared first.
        """
        doc = state if isinstance(state, MemoryState) else MemoryState.model_validate(state)
        if replace:
            await self.clear()
        if doc.messages:  # one atomic batch, each message with its own marks
            marks: dict[str, Marks] = {e.msg.id: e.marks for e in doc.messages}
            await self.add([e.msg for e in doc.messages], marks, on_duplicate="replace")

    # -------------------------------------------- AgentScope-compatible aliases
    async def get_memory(
        self, mark: str | None = None, exclude_mark: str | None = None
    ) -> list[Msg]:
        """AgentScope-style alias of :meth:`get`."""
        return await self.get(marks=mark, exclude_marks=exclude_mark)

    async def update_messages_mark(
        self,
        new_mark: str | None,
        old_mark: str | None = None,
        msg_ids: list[str] | None = None,
    ) -> int:
        """AgentScope-style alias: replace ``old_mark`` by ``new_mark`` on ``msg_ids``."""
        if msg_ids is None and old_mark is not None:
            msg_ids = [m.id for m in await self.get(marks=old_mark)]
        return await self.update_marks(msg_ids, add=new_mark, remove=old_mark)

    async def state_dict(self) -> dict[str, Any]:
        return (await self.export_state()).model_dump(mode="json")

    async def load_state_dict(self, state: dict[str, Any]) -> None:
        await self.import_state(state, replace=True)

    # ---------------------------------------------------------------- lifecycle
    async def aclose(self) -> None:
        """Release connections this backend created (never ones passed in)."""

    # ------------------------------------------------------------------ helpers
    def _decode(self, ids: Sequence[Any], docs: Sequence[Any], on_corrupt: OnCorrupt) -> list[Msg]:
        """Stored JSON documents (``str`` or ``bytes``, one per id, oldest first) as
        messages, validated in one call; a document that cannot be decoded is skipped and
        reported (``on_corrupt="skip"``) or raised as
        :class:`~mnemoscope.errors.CorruptRecordError` (``"raise"``)."""
        return decode_rows(self, ids, docs, on_corrupt)

    def _report_corrupt(self, record_id: str, reason: str, on_corrupt: OnCorrupt) -> None:
        err = CorruptRecordError(record_id, reason)
        if on_corrupt == "raise":
            raise err
        logger.warning(
            "skipping corrupt message %r in session %s/%s: %s",
            record_id,
            self.user_id,
            self.session_id,
            reason,
        )
        self.corrupt_records.append(err)
