"""How a message is stored and read back: exactly ``Msg.model_dump_json()``, validated
before anything is written, and decoded in one validation when read (a corrupt row is
reported through the memory's :meth:`~mnemoscope.memory.MemoryBase._report_corrupt`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from zlib import crc32

from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_json

from mnemoscope.errors import ValidationError
from mnemoscope.message import Msg

if TYPE_CHECKING:
    from mnemoscope.memory._base import MemoryBase, OnCorrupt


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
    want = [i if type(i) is str else _id_text(i) for i in ids]
    return msgs if [m.id for m in msgs] == want else None


def decode_counted(count: int, id_crc_sum: int, blob: str | bytes) -> list[Msg] | None:
    """The messages of ``blob``, a JSON array of ``count`` stored documents whose ids'
    CRC-32 (of their UTF-8) sum to ``id_crc_sum``; ``None`` otherwise (then decode row by
    row). The order-free form of :func:`decode_joined`'s check, for a server that sums
    checksums far more cheaply than it joins the ids: rows that are not one JSON object
    each, which could shift the messages against their rows, change the count or the
    ids."""
    try:
        msgs = _MSG_LIST.validate_json(blob)
    except (ValueError, TypeError):  # pydantic.ValidationError
        return None
    if len(msgs) != count:
        return None
    try:
        total = sum(map(crc32, map(str.encode, [m.id for m in msgs])))
    except UnicodeEncodeError:
        return None
    return msgs if total == id_crc_sum else None


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__
