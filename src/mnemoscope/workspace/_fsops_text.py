"""Text handling of the workspace helper: decoding, line splitting, safe names (stdlib only).

Shipped into every sandbox with ``_fsops.py`` and ``_fsops_search.py`` (see
:func:`~mnemoscope.workspace._fsops.helper_files`); it imports nothing, so both of them
load it with or without the mnemoscope package.

* **Decoding.** UTF-8 and UTF-16 with a byte-order mark are detected; everything else
  is UTF-8 decoded with ``surrogateescape``, so that a stray byte (``\\xff``) stays one
  lone surrogate (``\\udcff``) in the exact text and goes back to disk unchanged, while
  the rest of the file is still UTF-8 (no whole-file Latin-1 fallback, no mojibake).
  What is *shown* (Read, Grep) has U+FFFD for each such byte (:func:`display`); an
  Edit whose ``old_string`` was copied from that view still matches (:func:`find_spans`).
* **Lines.** :func:`split_lines` splits on ``\\n``, ``\\r\\n`` and ``\\r`` only. Read, Edit
  and Grep all use it, so they agree on line numbers; ``str.splitlines`` would also
  split on ``\\f``, ``\\v``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 and U+2029.
* **Names.** :func:`show` escapes what cannot be serialised or displayed safely in a
  path (undecodable bytes, control and invisible characters) with backslash escapes.
"""

from __future__ import annotations

import codecs
import re

BINARY_SNIFF_BYTES = 8192
"""A NUL byte in this many leading bytes (without a UTF-16 BOM) makes a file binary."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_BREAK = re.compile("\r\n|\r|\n")
_BAD_CHAR = "[\ufffd\udc80-\udcff]"
_SIMPLE_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


# --------------------------------------------------------------------- decoding
def decode_exact(data: bytes) -> tuple[str, str] | None:
    """``(text, encoding)`` that encodes back to ``data`` exactly; ``None`` if binary.

    Raises:
        UnicodeDecodeError: the file has a UTF-16 BOM but is not valid UTF-16.
    """
    if data.startswith(codecs.BOM_UTF8):
        return data[3:].decode("utf-8", "surrogateescape"), "utf-8-sig"
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16"), "utf-16"
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None
    return data.decode("utf-8", "surrogateescape"), "utf-8"


def decode_display(data: bytes) -> tuple[str, str] | None:
    """Like :func:`decode_exact`, for showing: U+FFFD for every byte that does not decode."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", "replace"), "utf-16"
    dec = decode_exact(data)
    return None if dec is None else (display(dec[0]), dec[1])


def display(text: str) -> str:
    """``text`` with U+FFFD for each lone surrogate (an undecodable byte)."""
    return _SURROGATE.sub("\ufffd", text)


def encode_text(text: str, encoding: str) -> bytes:
    """Encode for writing; in UTF-8 the lone surrogates of undecodable bytes become
    those bytes again. Raises ``UnicodeEncodeError`` for text the encoding cannot hold."""
    norm = codecs.lookup(encoding).name
    if norm in ("utf-8", "utf-8-sig"):
        body = text.encode("utf-8", "surrogateescape")
        return codecs.BOM_UTF8 + body if norm == "utf-8-sig" else body
    return text.encode(encoding)


def sniff_encoding(head: bytes) -> tuple[str, bool]:
    """``(encoding, uses CRLF)`` of a file from its first bytes (for a text write)."""
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = head[: len(head) // 2 * 2].decode("utf-16", "replace")
        return "utf-16", uses_crlf(text)
    if b"\x00" in head[:BINARY_SNIFF_BYTES]:
        return "utf-8", False
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig", uses_crlf(head[3:].decode("utf-8", "surrogateescape"))
    return "utf-8", uses_crlf(head.decode("utf-8", "surrogateescape"))


# ------------------------------------------------------------------------ lines
def split_lines(text: str) -> list[str]:
    """Lines of ``text`` without their breaks (``\\n``, ``\\r\\n``, ``\\r``); a final break
    does not start an empty line (as ``str.splitlines``)."""
    if not text:
        return []
    lines = text.split("\n") if "\r" not in text else _BREAK.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def line_at(text: str, index: int) -> int:
    """1-based number (as :func:`split_lines` counts) of the line ``text[index]`` is on."""
    breaks = text.count("\n", 0, index) + text.count("\r", 0, index)
    breaks -= text.count("\r\n", 0, index)
    if 0 < index < len(text) and text[index - 1] == "\r" and text[index] == "\n":
        breaks -= 1  # the CR of a CRLF whose LF is text[index]: same line
    return breaks + 1


def uses_crlf(text: str) -> bool:
    crlf = text.count("\r\n")
    return crlf > 0 and crlf >= text.count("\n") - crlf


def to_crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


# ------------------------------------------------------------------------- edits
def find_spans(text: str, old: str) -> list[tuple[int, int]]:
    """Non-overlapping ``(start, end)`` of ``old`` in ``text``, left to right.

    A U+FFFD in ``old`` (copied from a Read that showed an undecodable byte that way)
    matches one undecodable byte, or a real U+FFFD.
    """
    if "\ufffd" not in old:
        spans = []
        at = text.find(old)
        while at != -1:
            spans.append((at, at + len(old)))
            at = text.find(old, at + len(old))
        return spans
    rx = re.compile(_BAD_CHAR.join(re.escape(part) for part in old.split("\ufffd")))
    return [m.span() for m in rx.finditer(text)]


def replacement(matched: str, old: str, new: str) -> str:
    """``new`` for one match of ``old``: when ``new`` keeps as many U+FFFD as ``old``,
    they stand for the same original bytes, which are written back unchanged."""
    marks = [i for i, ch in enumerate(old) if ch == "\ufffd"]
    if not marks or new.count("\ufffd") != len(marks):
        return new
    originals = iter(matched[i] for i in marks)
    return "".join(next(originals) if ch == "\ufffd" else ch for ch in new)


# ------------------------------------------------------------------------- names
def show(name: str) -> str:
    """``name`` safe to serialise and display: an undecodable byte becomes ``\\xNN``, a tab,
    newline or CR ``\\t``/``\\n``/``\\r``, any other control or invisible character
    ``\\uNNNN`` (or ``\\UNNNNNNNN``). Printable names come back unchanged."""
    if name.isprintable():
        return name
    out = []
    for ch in name:
        if ch.isprintable():
            out.append(ch)
            continue
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[ch])
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)
