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
from types import TracebackType
from typing import Any, Literal, Self

from pydantic import BaseModel, Field, TypeAdapter
from pydantic_core import to_json

from mnemoscope.errors import CorruptRecordError, UserError, ValidationError
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


def prepare_add(
    msgs: Msg | Sequence[Msg] | None, marks: AddMarks, on_duplicate: str
) -> tuple[list[Msg], MarkPlan]:
    """Validate the arguments of :meth:`MemoryBase.add` (shared by the backends)."""
    check_on_duplicate(on_duplicate)
    items = [msgs] if isinstance(msgs, Msg) else normalize_msgs(msgs)
    return items, plan_marks(marks, items)


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


_MSG_LIST: TypeAdapter[list[Msg]] = TypeAdapter(list[Msg])


def decode_rows(
    memory: MemoryBase,
    ids: Sequence[Any],
    rows: Sequence[Any],
    on_corrupt: OnCorrupt,
) -> list[Msg]:
    """Decode stored JSON documents (``str`` or ``bytes``, one per id) into messages.

    All rows are validated in one call, as one JSON array (one pass of pydantic's parser,
    no per-row call overhead); the result is used only when it has one message per row,
    each carrying its row's id, so that a row holding something else than one JSON object
    cannot shift the others. Otherwise (a corrupt row among them) every row is decoded on
    its own (:func:`decode_one`) and the corrupt ones follow ``on_corrupt``.
    """
    if not rows:
        return []
    if isinstance(rows[0], bytes):
        blob: str | bytes = b"[" + b",".join(rows) + b"]"
    else:
        blob = "[" + ",".join(rows) + "]"
    msgs = decode_joined(ids, blob)
    if msgs is not None:
        return msgs
    decoded = (decode_one(memory, i, data, on_corrupt) for i, data in zip(ids, rows, strict=True))
    return [msg for msg in decoded if msg is not None]


def decode_one(memory: MemoryBase, msg_id: Any, data: Any, on_corrupt: OnCorrupt) -> Msg | None:
    """One stored document (``str`` or ``bytes``) as a message. A corrupt one is reported
    by ``memory`` and follows ``on_corrupt`` (see :class:`MemoryBase`): ``None`` when it is
    skipped."""
    try:
        return Msg.model_validate_json(data)
    except ValueError as exc:  # pydantic.ValidationError, invalid UTF-8
        memory._report_corrupt(_id_text(msg_id), _first_line(exc), on_corrupt)
        return None


def _id_text(msg_id: Any) -> str:
    return msg_id.decode("utf-8", "backslashreplace") if isinstance(msg_id, bytes) else str(msg_id)


def decode_joined(ids: Sequence[Any], blob: str | bytes) -> list[Msg] | None:
    """The messages of ``blob``, a JSON array of stored documents, when it holds exactly
    one valid message per id of ``ids``, in that order; ``None`` otherwise (then decode
    row by row to find the corrupt ones)."""
    try:
        msgs = _MSG_LIST.validate_json(blob)
    except (ValueError, TypeError):  # pydantic.ValidationError, bytes mixed with str
        return None
    if len(msgs) != len(ids):
        return None
    for msg, msg_id in zip(msgs, ids, strict=True):
        if msg.id != _id_text(msg_id):
            return None
    return msgs


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


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


class MemoryBase(AsyncResource, ABC):
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
