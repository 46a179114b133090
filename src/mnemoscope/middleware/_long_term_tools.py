"""The two tools of :class:`~mnemoscope.middleware.LongTermMemoryMiddleware`:
``search_memory(keywords, limit)`` and ``add_memory(thinking, content)``.

Both reach the store through the middleware's timed calls (``_retrieve``, ``_record``), so
they keep its user, agent and run scope and its timeouts, and report what they did as
``MemoryEvent`` s on the reply stream (``_event``). A failure is an error result the model
reads, never an exception out of the tool. The middleware builds them with
:func:`make_tools`; each tool calls the middleware's method of its name (a subclass may
override it), and those methods run :func:`run_search_memory` and :func:`run_add_memory`.

Also here, because the middleware's static path writes memories the same way: the one-line
form of a stored memory (:func:`one_line`) and the event data of one (:func:`item_data`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from mnemoscope.memory import MemoryItem, RecordResult
from mnemoscope.message import escape_injected
from mnemoscope.tool import FunctionTool, ToolBase, ToolContext, ToolResult

if TYPE_CHECKING:
    from mnemoscope.middleware._long_term import LongTermMemoryMiddleware

logger = logging.getLogger("mnemoscope.middleware.long_term")

_T = TypeVar("_T")

SEARCH_TOOL = "search_memory"
ADD_TOOL = "add_memory"


def make_tools(mw: LongTermMemoryMiddleware) -> list[ToolBase]:
    """The two tools as :class:`FunctionTool` s over ``mw``; ``limit`` defaults to its
    ``top_k``."""

    async def search_memory(
        keywords: list[str], limit: int = 5, ctx: ToolContext | None = None
    ) -> ToolResult:
        """Search long-term memory about the user (facts, preferences, past decisions).

        Args:
            keywords: short, specific keywords or phrases; each is searched on its own
                and the results are merged.
            limit: maximum number of memories to return.
        """
        return await mw.search_memory(keywords, limit, ctx)

    async def add_memory(
        thinking: str, content: list[str], ctx: ToolContext | None = None
    ) -> ToolResult:
        """Save durable facts to long-term memory for future conversations.

        Args:
            thinking: why these facts are worth remembering (not stored).
            content: the facts, one standalone sentence each; each becomes its own memory.
        """
        return await mw.add_memory(thinking, content, ctx)

    search_memory.__defaults__ = (mw.top_k, None)
    # the context parameter must be annotated with the class itself to be hidden
    search_memory.__annotations__["ctx"] = ToolContext
    add_memory.__annotations__["ctx"] = ToolContext
    return [
        FunctionTool(search_memory, is_read_only=True, auto_allow=True),
        FunctionTool(add_memory, auto_allow=True),
    ]


async def run_search_memory(
    mw: LongTermMemoryMiddleware,
    keywords: list[str],
    limit: int | None = None,
    ctx: ToolContext | None = None,
) -> ToolResult:
    """The ``search_memory`` tool: each keyword its own query; merged by id, best score."""
    limit = mw.top_k if limit is None else limit
    queries = list(dict.fromkeys(k.strip() for k in keywords if k and k.strip()))
    if not queries:
        return ToolResult.error("search_memory needs at least one non-empty keyword.")
    if limit < 1:
        return ToolResult.error(f"limit must be at least 1, got {limit}.")
    best: dict[str, MemoryItem] = {}
    failures: list[str] = []
    for query, outcome in await _each(queries, lambda q: mw._retrieve(q, limit)):
        if isinstance(outcome, BaseException):
            failures.append(f"{query!r}: {outcome}")
            continue
        for item in outcome:
            key = item.id or _norm(item.content)
            kept = best.get(key)
            if kept is None or (item.score or float("-inf")) > (kept.score or float("-inf")):
                best[key] = item
    items = sorted(
        best.values(),
        key=lambda i: i.score if i.score is not None else float("-inf"),
        reverse=True,
    )
    items = items[:limit]
    emit = ctx.emit if ctx is not None else None
    reply_id = ctx.reply_id if ctx is not None else ""
    if failures and len(failures) == len(queries):
        message = "search_memory failed for every keyword: " + "; ".join(failures)
        logger.warning("%s: %s", mw.name, message)
        if emit is not None:
            emit(mw._event(reply_id, "error", message, {"phase": "search_memory"}))
        return ToolResult.error(message + ". Nothing was found; do not assume memory is empty.")
    if emit is not None:
        emit(
            mw._event(
                reply_id,
                "error" if failures else "retrieve",
                f"search_memory: {count_memories(len(items))}"
                + (f"; failed: {'; '.join(failures)}" if failures else ""),
                {
                    "keywords": queries,
                    "items": [item_data(i) for i in items],
                    "phase": "search_memory",
                },
            )
        )
    lines = [
        f"{len(items)} memories for {', '.join(map(repr, queries))}:"
        if items
        else f"No memories found for {', '.join(map(repr, queries))}."
    ]
    lines += [
        f"- {one_line(i.content)}" + (f" (score {i.score:.2f})" if i.score is not None else "")
        for i in items
    ]
    if failures:
        lines.append(
            "Warning: these searches failed, results may be incomplete: " + "; ".join(failures)
        )
    return ToolResult(output="\n".join(lines), metadata={"ids": [i.id for i in items]})


async def run_add_memory(
    mw: LongTermMemoryMiddleware, thinking: str, content: list[str], ctx: ToolContext | None = None
) -> ToolResult:
    """The ``add_memory`` tool: each sentence of ``content`` becomes its own memory."""
    sentences = list(dict.fromkeys(s.strip() for s in content if s and s.strip()))
    if not sentences:
        return ToolResult.error("add_memory got no content: nothing was stored.")
    stored: list[tuple[str, list[MemoryItem]]] = []
    known: list[str] = []
    failed: list[str] = []
    for sentence, outcome in await _each(sentences, lambda s: _add_one(mw, s)):
        if isinstance(outcome, BaseException):
            failed.append(f"{sentence!r}: {outcome}")
        elif outcome is None:
            known.append(sentence)
        elif outcome.stored_anything:
            stored.append((sentence, outcome.added + outcome.updated))
        else:
            failed.append(f"{sentence!r}: the store kept nothing")
    lines: list[str] = []
    if stored:
        lines.append(f"Stored {len(stored)} of {len(sentences)} memories:")
        lines += [f"- {s}" for s, _ in stored]
    if known:
        lines.append("Already in memory (not stored again):")
        lines += [f"- {s}" for s in known]
    if failed:
        lines.append("NOT stored:")
        lines += [f"- {f}" for f in failed]
    message = "\n".join(lines)
    emit = ctx.emit if ctx is not None else None
    reply_id = ctx.reply_id if ctx is not None else ""
    if failed:
        logger.warning("%s: add_memory did not store everything: %s", mw.name, "; ".join(failed))
    if emit is not None:
        emit(
            mw._event(
                reply_id,
                "error" if failed else "write",
                message,
                {
                    "phase": "add_memory",
                    "added": [item_data(i) for _, items in stored for i in items],
                    "already_known": known,
                    "failed": failed,
                },
            )
        )
    ids = [i.id for _, items in stored for i in items]
    return ToolResult(output=message, is_error=bool(failed), metadata={"ids": ids})


async def _add_one(mw: LongTermMemoryMiddleware, sentence: str) -> RecordResult | None:
    """Store one sentence; ``None`` when an identical memory already exists."""
    try:
        hits = await mw._retrieve(sentence, 3)
    except Exception as exc:  # the duplicate check is an optimisation
        logger.info("%s: duplicate check failed, storing anyway: %s", mw.name, exc)
        hits = []
    if any(_norm(h.content) == _norm(sentence) for h in hits):
        return None
    return await mw._record(sentence, infer=mw.tool_infer)


def count_memories(n: int) -> str:
    """``"1 memory"``, ``"3 memories"``."""
    return f"{n} memory" if n == 1 else f"{n} memories"


def one_line(content: str) -> str:
    """A memory as one list item: folded onto one line, wrapper delimiters neutralised, so a
    stored text cannot add lines of its own or end a wrapper around the list."""
    return escape_injected(content, one_line=True)


def item_data(item: MemoryItem) -> dict[str, Any]:
    """A memory as it appears in a ``MemoryEvent``'s data."""
    return {"id": item.id, "content": item.content, "score": item.score}


async def _each(
    inputs: list[str], call: Callable[[str], Awaitable[_T]]
) -> list[tuple[str, _T | BaseException]]:
    """``call`` on every input at once: each input with its result or what it raised. A
    cancellation is raised, never returned as a failure."""
    outcomes = await asyncio.gather(*(call(x) for x in inputs), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, asyncio.CancelledError):
            raise outcome
    return list(zip(inputs, outcomes, strict=True))


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()
