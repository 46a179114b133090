"""What of a tool's result reaches the model: bounded, serialisable, never crashing.

* :func:`describe_exception` names an exception even when its ``__str__`` or
  ``__repr__`` raises (a tool's bug must not become the agent's crash).
* :func:`cap_output` keeps the head and the tail of a long output with a marker saying
  how much was cut; the full text (itself bounded by :data:`MAX_STORED_OUTPUT_CHARS`) is
  returned separately so the caller can store it without sending it.
* Lone surrogates (e.g. from undecodable file names) are backslash-escaped, so the
  message holding the result can always be serialised.
"""

from __future__ import annotations

import asyncio

from mnemoscope.message import ImageBlock, TextBlock, ToolResultBlock

MAX_DESCRIPTION_CHARS = 2000
"""An exception's text shown to the model is cut to this many characters."""
MAX_STORED_OUTPUT_CHARS = 1_000_000
"""The full output kept (stored, not sent) when a result is cut is itself cut to this."""
MIN_OUTPUT_CHARS = 1000
"""However small the context budget, a result keeps at least this many characters."""


def must_propagate(exc: BaseException) -> bool:
    """Whether an exception out of tool code must propagate instead of becoming an error
    result: ``KeyboardInterrupt``, ``SystemExit``, and the caller's cancellation (a
    ``CancelledError`` while the current task is being cancelled; one a tool raises on
    its own is the tool's failure)."""
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        return True
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is None or task.cancelling() > 0
    return False


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"``, safe for any exception (raising ``__str__`` included)."""
    try:
        name = type(exc).__name__
    except Exception:  # pragma: no cover - a metaclass that breaks __name__
        name = "Exception"
    text: str | None = None
    for render in (str, repr):
        try:
            text = render(exc)
            if not isinstance(text, str):
                text = None
                continue
            break
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # a broken __str__ may raise anything
            continue
    if text is None:
        text = "<the exception's message could not be rendered>"
    text = escape_surrogates(text)
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[:MAX_DESCRIPTION_CHARS] + f"... [{len(text) - MAX_DESCRIPTION_CHARS} chars cut]"
    return f"{name}: {text}" if text else name


def escape_surrogates(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udcff`` escapes (valid UTF-8 after)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def cut_middle(text: str, max_chars: int, *, what: str = "output") -> str:
    """Head and tail of ``text`` within about ``max_chars``, with a marker in between."""
    if len(text) <= max_chars:
        return text
    marker = (
        f"\n\n[... {len(text) - max_chars:,} of {len(text):,} characters of this {what} "
        "were cut here to fit the context; the head and the tail are shown. Call the tool "
        "again with narrower arguments (a range, a filter, a limit) to see the rest ...]\n\n"
    )
    head = max_chars * 2 // 3
    tail = max_chars - head
    return text[:head] + marker + (text[-tail:] if tail else "")


def cap_output(block: ToolResultBlock, max_chars: int) -> tuple[ToolResultBlock, str | None]:
    """Bound what of ``block`` reaches the model.

    Returns:
        ``(block_to_send, full_text)``: ``full_text`` is ``None`` when nothing was cut,
        else the whole textual output (cut to :data:`MAX_STORED_OUTPUT_CHARS`) for the
        caller to store next to the result.
    """
    output = block.output
    if isinstance(output, str):
        safe = escape_surrogates(output)
        if len(safe) <= max_chars:
            return (block if safe is output else block.model_copy(update={"output": safe})), None
        capped: str | list[TextBlock | ImageBlock] = cut_middle(safe, max_chars)
        full = safe
    else:
        texts = [b for b in output if isinstance(b, TextBlock)]
        total = sum(len(b.text) for b in texts)
        share = max(max_chars // max(len(texts), 1), 1)
        changed = False
        parts: list[TextBlock | ImageBlock] = []
        for b in output:
            if isinstance(b, TextBlock):
                text = escape_surrogates(b.text)
                if total > max_chars:
                    text = cut_middle(text, share)
                if text is not b.text:
                    changed = True
                    b = TextBlock(text=text)
            parts.append(b)
        if not changed:
            return block, None
        capped = parts
        if total <= max_chars:
            return block.model_copy(update={"output": capped}), None
        full = escape_surrogates("\n".join(b.text for b in texts))
    stored = cut_middle(full, MAX_STORED_OUTPUT_CHARS, what="stored output")
    return block.model_copy(update={"output": capped}), stored
