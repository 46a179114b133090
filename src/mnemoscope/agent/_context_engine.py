"""The agent's context engine: loads history under the :class:`ContextPolicy`, compacts
it (at the start of a reply, or in the background after one), and builds every model
input with its :class:`ContextEvent`.

A compaction that fails (the summariser raises or times out, a middleware raises)
changes nothing: the budget drops the oldest history with the notice, a
:class:`CompactionEvent` with ``status="failed"`` is emitted and a WARNING is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from mnemoscope.context import (
    COMPRESSED_MARK,
    COVERS_KEY,
    PINNED_MARK,
    SUMMARY_MARK,
    BuildOptions,
    BuiltContext,
    CompactionContext,
    ContextPolicy,
    RecallIndex,
    fit_summary,
    group_history,
    is_summary,
    plan_compaction,
    render_recalled,
    render_summary,
    sanitize_history,
    split_summary,
    write_summary,
)
from mnemoscope.errors import UserError
from mnemoscope.message import HintBlock, Msg
from mnemoscope.middleware import AgentEvent, CompactionEvent, ContextEvent, ReplyContext
from mnemoscope.tool import COMPACT_TOOL, CompactOutcome, describe_exception, must_propagate

if TYPE_CHECKING:
    from mnemoscope.agent._agent import Agent

logger = logging.getLogger("mnemoscope.context")

HISTORY_EXCLUDED = ("hint", COMPRESSED_MARK)
RECALL_TOOL = "recall"


def _is_hint(msg: Msg) -> bool:
    """A one-off injection of this reply (stored with the ``hint`` mark, never history)."""
    return bool(msg.content) and all(isinstance(b, HintBlock) for b in msg.content)


class ContextEngine:
    """One per agent; per-reply state lives in ``ReplyContext.state_for(engine)``."""

    def __init__(self, agent: Agent, policy: ContextPolicy) -> None:
        self.agent = agent
        self.policy = policy
        self.prefix_changes = 0
        self._last_prefix: tuple[str, str | None] | None = None
        self._background: asyncio.Task[None] | None = None
        self._queued: list[AgentEvent] = []
        self._index = RecallIndex()

    # ------------------------------------------------------------- loading
    async def load(self, ctx: ReplyContext) -> AsyncIterator[AgentEvent]:
        """Load this reply's history (and compact it first when due)."""
        await self.wait_background(self.policy.compaction_wait)
        for event in self._queued:
            yield event
        self._queued = []
        state = ctx.state_for(self)
        summary, tail = await self._load_history()
        if self.policy.compacts and not self.policy.background_compaction:
            async for event in self._compact(summary, tail, state, background=False):
                yield event
            summary, tail = state.get("summary", summary), state.get("tail", tail)
        ctx.history = tail
        state["summary"] = summary
        if self.policy.window_tokens is None:
            return  # no budget: everything is sent, pins and recall change nothing
        pinned = await self.agent.memory.get(marks=PINNED_MARK)
        state["pinned"] = frozenset(m.id for m in pinned)
        if self.policy.recall_tokens > 0:
            state["pool"] = [
                m for m in await self.agent.memory.get(marks=COMPRESSED_MARK) if not is_summary(m)
            ]

    async def _load_history(self) -> tuple[Msg | None, list[Msg]]:
        memory = self.agent.memory
        raw = await memory.get(
            last_n=self.agent.max_history_messages, exclude_marks=list(HISTORY_EXCLUDED)
        )
        if self.policy.summarizer is not None and not any(is_summary(m) for m in raw):
            # a window (max_history_messages) may start after the summary
            raw = [
                *await memory.get(marks=SUMMARY_MARK, exclude_marks=COMPRESSED_MARK, last_n=1),
                *raw,
            ]
        return split_summary(raw)

    # ---------------------------------------------------------- compaction
    async def _compact(
        self, summary: Msg | None, tail: list[Msg], state: dict[str, Any], *, background: bool
    ) -> AsyncIterator[AgentEvent]:
        budget = self.policy.input_tokens
        assert budget is not None and self.policy.summarizer is not None
        pinned = frozenset(m.id for m in await self.agent.memory.get(marks=PINNED_MARK))
        builder = self.agent.context_builder
        covered = plan_compaction(
            group_history(sanitize_history(tail)),
            builder,
            trigger_tokens=int(budget * self.policy.compact_trigger),
            keep_tokens=int(budget * self.policy.compact_keep),
            pinned=set(pinned),
        )
        if not covered:
            return
        cctx = CompactionContext(
            agent=self.agent, memory=self.agent.memory, msgs=covered, previous=summary
        )
        async for event in self._run_compaction(cctx, background=background):
            yield event
        if cctx.summary is not None:
            done = set(cctx.summary.metadata[COVERS_KEY])
            state["summary"] = cctx.summary
            state["tail"] = [m for m in tail if m.id not in done]

    async def _run_compaction(
        self, cctx: CompactionContext, *, background: bool, by_tool: bool = False
    ) -> AsyncIterator[AgentEvent]:
        """One compaction through the ``on_compress_context`` chain; its last event is
        the :class:`CompactionEvent` saying how it went. On failure nothing is changed
        (the summary is written last), the failure is logged and reported."""
        try:
            async for event in self.agent._compress_chain(cctx):
                yield event
        except Exception as exc:
            if must_propagate(exc):
                raise
            why = (
                f"the summariser took longer than {self.policy.summarizer_timeout} s"
                if isinstance(exc, TimeoutError)
                else describe_exception(exc)
            )
            logger.warning(
                "context compaction of %d messages failed (%s); nothing was changed, %s",
                len(cctx.msgs),
                why,
                f"the {COMPACT_TOOL} tool tells the model"
                if by_tool
                else "the budget drops the oldest history instead",
            )
            cctx.summary = None
            yield CompactionEvent(status="failed", error=why, background=background)
            return
        if cctx.summary is None:
            yield CompactionEvent(status="skipped", background=background)
            return
        yield CompactionEvent(
            status="done",
            summary_id=cctx.summary.id,
            covered=[m.id for m in cctx.msgs],
            background=background,
        )

    async def compact_now(self, ctx: ReplyContext) -> CompactOutcome:
        """Compact everything complete so far, for the ``compact_context`` tool.

        Covers the loaded history, this reply's message and its finished steps (a step
        with its results), never the step being run (whose calls wait for results, this
        tool's call among them), pinned messages or hints. The rest of the reply then
        sees the summary instead of what it covers.
        """
        if not await self.wait_background(self.policy.compaction_wait):
            return CompactOutcome(
                "A background compaction is still running; nothing was changed. Try again "
                "after your next step.",
                failed=True,
            )
        state = ctx.state_for(self)
        summary: Msg | None = state.get("summary")
        done_ids: set[str] = state.setdefault("compacted_in_reply", set())
        finished = [
            m
            for m in [*ctx.history, ctx.input, *ctx.transcript]
            if m.id not in done_ids and not _is_hint(m)
        ]
        pinned: frozenset[str] | None = state.get("pinned")
        if pinned is None:  # not loaded with no budget
            pinned = frozenset(m.id for m in await self.agent.memory.get(marks=PINNED_MARK))
        covered = [
            m
            for group in group_history(sanitize_history(finished))
            if not any(m.id in pinned for m in group)
            for m in group
        ]
        if not covered:
            return CompactOutcome("Nothing to compact: the conversation has no finished turns yet.")
        cctx = CompactionContext(
            agent=self.agent, memory=self.agent.memory, msgs=covered, previous=summary
        )
        last: AgentEvent | None = None
        async for event in self._run_compaction(cctx, background=False, by_tool=True):
            ctx.emit(event)
            last = event
        if cctx.summary is None:
            why = last.error if isinstance(last, CompactionEvent) and last.error else "skipped"
            return CompactOutcome(
                f"The compaction did not happen ({why}); nothing was changed, the "
                "conversation stays as it was.",
                failed=True,
            )
        new = cctx.summary
        ids = set(new.metadata[COVERS_KEY])
        state["summary"] = new
        ctx.history = [m for m in ctx.history if m.id not in ids]
        done_ids.update(ids)
        if "pool" in state:  # what was compacted can now be recalled automatically
            state["pool"] = [*state["pool"], *(m for m in cctx.msgs if not is_summary(m))]
        first, end = cctx.msgs[0].timestamp, cctx.msgs[-1].timestamp
        return CompactOutcome(
            f"Compacted {len(cctx.msgs)} messages (from {first:%Y-%m-%d %H:%M} to "
            f"{end:%Y-%m-%d %H:%M} UTC"
            + (", with the previous summary" if summary is not None else "")
            + f") into summary {new.id}. From now on you see the summary instead of them; "
            f"their full text stays stored and searchable with the {RECALL_TOOL} tool."
        )

    async def compress_core(self, cctx: CompactionContext) -> AsyncIterator[AgentEvent]:
        """The innermost ``on_compress_context`` handler: summarise, then store."""
        if not cctx.msgs:
            return
        if cctx.summary_text is None:
            summarizer = self.policy.summarizer
            if summarizer is None:
                raise UserError(
                    "compaction needs a summariser: set ContextPolicy(summarizer="
                    "ModelSummarizer(model)) or ExtractiveSummarizer(), or write "
                    "CompactionContext.summary_text in an on_compress_context middleware"
                )
            cctx.summary_text = await asyncio.wait_for(
                summarizer.summarize(cctx.msgs, cctx.previous), self.policy.summarizer_timeout
            )
        limit = self.policy.summary_budget
        if limit is not None:
            # the header render_summary adds is counted too
            cctx.summary_text = fit_summary(
                cctx.summary_text, limit - 40, self.agent.context_builder.text_tokens
            )
        cctx.summary = await write_summary(cctx.memory, cctx.summary_text, cctx.msgs, cctx.previous)
        return
        yield  # an async generator, like every onion core

    def after_reply(self) -> None:
        """Start a background compaction when the policy asks for one."""
        if not (self.policy.compacts and self.policy.background_compaction):
            return
        if self._background is not None and not self._background.done():
            return
        self._background = asyncio.get_running_loop().create_task(
            self._run_background(), name="mnemoscope-compaction"
        )

    async def _run_background(self) -> None:
        summary, tail = await self._load_history()
        async for event in self._compact(summary, tail, {}, background=True):
            self._queued.append(event)

    async def wait_background(self, wait_seconds: float | None = None) -> bool:
        """Wait (at most ``wait_seconds``) for a background compaction; True when none
        is running any more."""
        task = self._background
        if task is None:
            return True
        if not task.done():
            await asyncio.wait({task}, timeout=wait_seconds)
            if not task.done():
                return False
        self._background = None
        error = None if task.cancelled() else task.exception()
        if error is not None:
            logger.warning("background compaction failed: %s", describe_exception(error))
            self._queued.append(
                CompactionEvent(status="failed", error=describe_exception(error), background=True)
            )
        return True

    # -------------------------------------------------------------- recall
    async def recall(
        self,
        query: str,
        *,
        limit: int = 5,
        only_cut: bool = False,
        exclude: str | None = None,
        max_chars: int | None = 2000,
    ) -> str:
        """The session's stored turns best matching ``query``, verbatim (the ``recall``
        tool's answer): BM25 over :meth:`MemoryBase.get`, on every backend."""
        memory = self.agent.memory
        if only_cut:
            pool = await memory.get(marks=COMPRESSED_MARK)
        else:
            pool = await memory.get(exclude_marks="hint")
        pool = [m for m in pool if not is_summary(m) and m.id != exclude]
        hits = self._index.search(query, pool, limit=limit)
        if not hits:
            return f"No earlier turn matches {query!r}."
        msgs = sorted((h.msg for h in hits), key=lambda m: m.timestamp)
        return f"{len(msgs)} matching turns, oldest first:\n\n" + render_recalled(msgs, max_chars)

    # ------------------------------------------------------------ building
    @staticmethod
    def _transcript(ctx: ReplyContext, state: dict[str, Any]) -> list[Msg]:
        """This reply's transcript without what the compaction tool covered (the current
        message stays shown: it is the request being answered)."""
        done: set[str] | None = state.get("compacted_in_reply")
        if not done:
            return ctx.transcript
        return [m for m in ctx.transcript if m.id not in done]

    def build(self, ctx: ReplyContext, iteration: int) -> tuple[BuiltContext, ContextEvent]:
        """The model input of one call, and its :class:`ContextEvent` (with a budget or
        without one: the parts are always counted)."""
        state = ctx.state_for(self)
        summary: Msg | None = state.get("summary")
        shown = render_summary(summary) if summary is not None else None
        toolkit = self.agent.toolkit
        how = None
        if RECALL_TOOL in toolkit:
            how = (
                f"They are still stored: search them with the {RECALL_TOOL} tool "
                "(keywords), it returns the turns verbatim with ids and dates."
            )
        elif self.policy.recall_tokens > 0:
            how = "The most relevant of them are recalled below the history when they match."
        policy = self.policy
        built = self.agent.context_builder.build(
            system_prompt=ctx.system_prompt or "",
            history=ctx.history,
            current=ctx.input,
            injected=ctx.injected,
            transcript=self._transcript(ctx, state),
            options=BuildOptions(
                summary=shown,
                pinned=state.get("pinned", frozenset()),
                pin_tokens=policy.pin_tokens if policy.window_tokens is not None else None,
                recall_pool=state.get("pool", ()),
                recall_tokens=policy.recall_tokens if policy.window_tokens is not None else 0,
                notice_how=how,
                clear_tool_results_after=policy.clear_tool_results_after,
                clear_exclude_tools=frozenset(policy.clear_exclude_tools),
            ),
        )
        prefix = (ctx.system_prompt or "", summary.id if summary is not None else None)
        if self._last_prefix is not None and prefix != self._last_prefix:
            self.prefix_changes += 1
        self._last_prefix = prefix
        event = ContextEvent(
            reply_id=ctx.reply_id,
            iteration=iteration,
            tokens=built.tokens,
            parts=built.parts,
            kept=built.kept_ids,
            dropped=[m.id for m in built.dropped],
            compacted=list(summary.metadata.get(COVERS_KEY, [])) if summary is not None else [],
            offloaded=built.offloaded_ids,
            recalled=built.recalled_ids,
            pinned=built.pinned_ids,
            summary_id=summary.id if summary is not None else None,
            prefix_changes=self.prefix_changes,
        )
        return built, event
