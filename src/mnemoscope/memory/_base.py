"""The short-term memory contract (session stores of :class:`~mnemoscope.message.Msg`).

Every backend is scoped by ``user_id`` and ``session_id`` and keeps, per message, its
JSON (exactly ``Msg.model_dump_json()``) and a set of *marks*: short labels such as
``"hint"``, ``"summary"``, ``"tool_result"`` or your own, indexed so that filtering by
mark never scans message JSON.

Semantics shared by all backends (the contract suite in ``tests/memory`` checks them):

* insertion order is the order of :meth:`MemoryBase.add` calls, and within one call the
  order of the list; a batch is stored atomically (all or nothing);
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
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Literal, Self

from pydantic import BaseModel, Field
from pydantic_core import to_json

from mnemoscope.errors import CorruptRecordError, UserError, ValidationError
from mnemoscope.message import Msg

logger = logging.getLogger("mnemoscope.memory")

Marks = str | Sequence[str] | None
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


def prepare_add(
    msgs: Msg | Sequence[Msg] | None, marks: Marks, on_duplicate: str
) -> tuple[list[Msg], list[str]]:
    """Validate the arguments of :meth:`MemoryBase.add` (shared by the backends)."""
    check_on_duplicate(on_duplicate)
    return normalize_msgs(msgs), normalize_marks(marks)


def dump_msg(msg: Msg) -> str:
    """``msg.model_dump_json()``: what every backend stores (InMemory checks it too).

    Raises:
        ValidationError: the message cannot be serialised; the message names its id, the
            offending field (``content[0].text``, ``metadata.key``) and the fix.
    """
    try:
        data = msg.model_dump_json()
    except (ValueError, TypeError) as exc:  # pydantic_core.PydanticSerializationError
        raise _refusal(msg, _unserialisable(msg, ""), str(exc)) from exc
    # pydantic replaces a lone surrogate in a dict key by U+FFFD instead of failing: the
    # stored message would silently differ from the one given
    if "\ufffd" in data:
        found = _unserialisable(msg, "")
        if found:
            raise _refusal(msg, found, "")
    return data


def _refusal(msg: Msg, found: tuple[str, str] | None, detail: str) -> ValidationError:
    where = f"{found[0] or 'the message'}: {found[1]}" if found else detail
    return ValidationError(
        f"message {msg.id!a} cannot be stored: {where}; nothing of the batch was stored. "
        "Escape undecodable text first (e.g. text.encode('utf-8', 'backslashreplace')"
        ".decode()) and keep metadata to JSON types (str, int, float, bool, None, lists, "
        "dicts with str keys)"
    )


def dump_msgs(items: Sequence[Msg]) -> list[tuple[str, str]]:
    """``(id, JSON)`` of every message, all validated before a backend writes any."""
    return [(m.id, dump_msg(m)) for m in items]


def _unserialisable(value: Any, path: str) -> tuple[str, str] | None:
    """``(path, reason)`` of the first part of ``value`` that JSON cannot hold."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return path, (
                f"text with a lone surrogate {value[exc.start]!a} at index {exc.start} "
                "is not valid UTF-8"
            )
        return None
    if value is None or isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            found = _unserialisable(getattr(value, name), f"{path}.{name}" if path else name)
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _unserialisable(key, path):
                return path, f"key {key!a} has a lone surrogate and is not valid UTF-8"
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                return path, f"key {key!a} of type {type(key).__name__} is not a JSON key"
            found = _unserialisable(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _unserialisable(item, f"{path}[{i}]")
            if found:
                return found
        return None
    try:
        to_json(value)
    except (ValueError, TypeError):
        return path, f"an object of type {type(value).__name__} is not JSON-serialisable"
    return None


def normalize_ids(ids: str | Iterable[str]) -> list[str]:
    return [ids] if isinstance(ids, str) else list(ids)


class MemoryBase(ABC):
    """Async session store of messages with marks.

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
    @abstractmethod
    async def add(
        self,
        msgs: Msg | Sequence[Msg] | None,
        marks: Marks = None,
        *,
        on_duplicate: OnDuplicate = "ignore",
    ) -> int:
        """Store one or many messages atomically; returns how many were newly stored."""

    @abstractmethod
    async def delete(self, ids: str | Iterable[str]) -> int:
        """Delete messages by id; returns how many were deleted."""

    @abstractmethod
    async def delete_by_mark(self, marks: Marks) -> int:
        """Delete every message carrying any of ``marks``; returns how many."""

    @abstractmethod
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

    @abstractmethod
    async def clear(self) -> None:
        """Delete the whole session."""

    # ------------------------------------------------------------------ reading
    @abstractmethod
    async def get(
        self,
        *,
        last_n: int | None = None,
        marks: Marks = None,
        exclude_marks: Marks = None,
        on_corrupt: OnCorrupt = "skip",
    ) -> list[Msg]:
        """Messages in insertion order, optionally only the last ``last_n`` after filtering."""

    @abstractmethod
    async def get_marks(self, msg_id: str) -> list[str] | None:
        """The marks of one message, or ``None`` when it is not stored."""

    @abstractmethod
    async def size(self) -> int:
        """Number of stored messages."""

    # ------------------------------------------------------------ whole session
    async def export_state(self) -> MemoryState:
        """The whole session (messages with their marks) as one document."""
        msgs = await self.get(on_corrupt="raise")
        entries = [StoredMsg(msg=m, marks=await self.get_marks(m.id) or []) for m in msgs]
        return MemoryState(user_id=self.user_id, session_id=self.session_id, messages=entries)

    async def import_state(
        self, state: MemoryState | dict[str, Any], *, replace: bool = True
    ) -> None:
        """Load a session exported by :meth:`export_state` (any backend's).

        With ``replace=True`` the current session is cleared first.
        """
        doc = state if isinstance(state, MemoryState) else MemoryState.model_validate(state)
        if replace:
            await self.clear()
        # group consecutive entries with identical marks to keep batches large
        batch: list[Msg] = []
        batch_marks: list[str] | None = None
        for entry in doc.messages:
            if batch and entry.marks != batch_marks:
                await self.add(batch, batch_marks, on_duplicate="replace")
                batch = []
            batch.append(entry.msg)
            batch_marks = entry.marks
        if batch:
            await self.add(batch, batch_marks, on_duplicate="replace")

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

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ helpers
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
