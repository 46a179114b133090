"""Long-term memory as middleware, over any :class:`~mnemoscope.memory.LongTermMemoryBase`.

Example::

    memory = LongTermMemoryMiddleware(store, user_id="alice", mode="both")
    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=agent_model,
        toolkit=Toolkit(tools=await memory.list_tools()),
        middlewares=[memory],
    )
    await agent.reply("Remember that I prefer dark-mode charts.")
    await memory.aclose()   # flushes background writes

Control modes (``mode``):

* ``"static_control"``: before each reply the user's message is searched and the hits are
  shown to the model as an ``AssistantMsg(name="memory")`` (``ReplyContext.injected``:
  this reply only, never stored); after the reply exactly the user's input and the final
  answer are written back. No tools: :meth:`list_tools` returns ``[]``.
* ``"agent_control"``: the tools ``search_memory(keywords, limit)`` and
  ``add_memory(thinking, content)`` plus a short system-prompt nudge; nothing automatic.
* ``"both"``: both at once.

Stored memories are untrusted text: in the injected message and in ``search_memory``
results each one is folded onto one line with wrapper delimiters neutralised
(:func:`~mnemoscope.message.escape_injected`), so it cannot add lines of its own or end
a wrapper around the list. Subclasses (``Mem0Middleware``) inherit this.

Write-back happens when the loop ends with an answer (``done``) or at ``max_iters`` (then
the last thing the assistant said is the answer, never the framework's "I stopped after
N steps" notice); a reply that raised or was cancelled writes nothing. Failures are loud:
a static search or write that fails or times out is logged and reported as a
``MemoryEvent(action="error")`` while the reply goes on; a tool's failure is an error
result the model reads. With ``await_write=False`` the write runs in a task tracked by the
middleware (it outlives the reply by design); its failure is logged and emitted on the
reply stream if that is still open, and :meth:`aclose` waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.events import AgentEvent, MemoryEvent
from mnemoscope.memory import LongTermMemoryBase, MemoryItem, RecordResult
from mnemoscope.message import AssistantMsg, Msg, UserMsg
from mnemoscope.middleware._base import MiddlewareBase, ReplyHandler
from mnemoscope.middleware._context import ReplyContext
from mnemoscope.middleware._long_term_tools import (
    ADD_TOOL,
    SEARCH_TOOL,
    count_memories,
    item_data,
    make_tools,
    one_line,
    run_add_memory,
    run_search_memory,
)
from mnemoscope.tool import ToolBase, ToolContext, ToolResult

if TYPE_CHECKING:
    from mnemoscope.middleware._view import AgentView

logger = logging.getLogger("mnemoscope.middleware.long_term")


_T = TypeVar("_T")

Mode = Literal["static_control", "agent_control", "both"]
MODES: tuple[str, ...] = ("static_control", "agent_control", "both")

MEMORY_MSG_NAME = "memory"

NUDGE = """## Long-term memory
You have a long-term memory that persists across conversations with this user.{tools}
Store durable facts only (preferences, facts about the user, decisions), never secrets."""
_SEARCH_LINE = (
    "\n- Before answering anything that may depend on earlier conversations, call "
    "`search_memory` with a few short, specific keywords."
)
_ADD_LINE = (
    "\n- When you learn something worth remembering later, call `add_memory` with one "
    "standalone sentence per fact."
)
_STATIC_LINE = (
    "\n- Memories relevant to the current message may already be shown as a message named 'memory'."
)


@dataclass(eq=False, repr=False)
class LongTermMemoryMiddleware(MiddlewareBase):
    """The three control modes, the two tools, injection and write-back over one store.

    Args:
        store: where memories live.
        user_id: whose memories these are (required).
        mode: ``"static_control"``, ``"agent_control"`` or ``"both"``.
        agent_id: tags writes; also filters searches when ``scope_search_by_agent``.
        run_id: tags writes and filters searches (leave ``None`` for memory that spans
            sessions).
        top_k: memories retrieved per static search; default ``limit`` of ``search_memory``.
        threshold: minimum relevance score; ``None`` lets the store decide.
        scope_search_by_agent: when ``False``, searches see the user's memories from every
            agent.
        await_write: await the post-reply write (``True``) or run it in a tracked
            background task.
        name: ``source`` of the :class:`MemoryEvent` s this middleware emits.
        search_timeout: seconds one search may take (``None``: no limit).
        write_timeout: seconds one write may take (``None``: no limit).
        tool_infer: ``infer`` passed to the store by ``add_memory``. ``False`` (default)
            stores each sentence exactly as the agent wrote it; ``True`` lets the store's
            LLM re-extract it (it may rewrite, merge or drop the fact).
        close_store: close ``store`` in :meth:`aclose` (set by subclasses that build it).
    """

    store: LongTermMemoryBase
    _: KW_ONLY
    # The settings every long-term memory middleware takes, declared once: subclasses
    # (``Mem0Middleware``) inherit them, so their constructors list them too.
    user_id: str
    mode: Mode = "both"
    agent_id: str | None = None
    run_id: str | None = None
    top_k: int = 5
    threshold: float | None = None
    scope_search_by_agent: bool = True
    await_write: bool = True
    name: str = "long_term_memory"
    search_timeout: float | None = 30.0
    write_timeout: float | None = 120.0
    tool_infer: bool = False
    close_store: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.store, LongTermMemoryBase):
            raise UserError(f"store must be a LongTermMemoryBase, got {type(self.store).__name__}")
        if not isinstance(self.user_id, str) or not self.user_id.strip():
            raise UserError(f"user_id must be a non-empty string, got {self.user_id!r}")
        if self.mode not in MODES:
            raise UserError(f"mode must be one of {', '.join(map(repr, MODES))}, got {self.mode!r}")
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise UserError(f"top_k must be a positive integer, got {self.top_k!r}")
        for label, value in (
            ("search_timeout", self.search_timeout),
            ("write_timeout", self.write_timeout),
        ):
            if value is not None and value <= 0:
                raise UserError(f"{label} must be positive or None, got {value!r}")
        self._closed = False
        self._background: set[asyncio.Task[Any]] = set()
        self.failed_background_writes = 0
        """Background writes that failed since construction (each was logged)."""
        self._tools = make_tools(self) if self.mode != "static_control" else []

    # ------------------------------------------------------------- properties
    @property
    def static(self) -> bool:
        return self.mode in ("static_control", "both")

    @property
    def agentic(self) -> bool:
        return self.mode in ("agent_control", "both")

    @property
    def search_agent_id(self) -> str | None:
        """The ``agent_id`` searches filter by (``None`` when searches span agents)."""
        return self.agent_id if self.scope_search_by_agent else None

    @property
    def pending_writes(self) -> int:
        """Background writes not finished yet."""
        return sum(1 for t in self._background if not t.done())

    # -------------------------------------------------------------- lifecycle
    def setup(self, agent: AgentView) -> None:
        """Check, when the agent is built, that a mode with tools has them in the toolkit.

        The agent does not collect middleware tools (as in AgentScope): the user passes
        them. Offering some of them (only ``search_memory``, say) is a choice; offering none
        in ``agent_control`` or ``both`` is a mistake that would leave the model without
        memory tools and the prompt without its nudge, so it is refused.

        Raises:
            UserError: none of this middleware's tools is in the agent's toolkit.
        """
        if self.agentic and not any(agent.toolkit.get(t.name) is t for t in self._tools):
            names = " and ".join(t.name for t in self._tools)
            raise UserError(
                f"{self!r} runs in mode={self.mode!r}, which offers the tools {names}, but "
                f"none of them is in the toolkit of agent {agent.name!r}; build the agent "
                "with toolkit=Toolkit(tools=await middleware.list_tools()) (add your own "
                "tools to that list), or use mode='static_control' for memory without tools"
            )

    async def list_tools(self) -> list[ToolBase]:
        """``search_memory`` and ``add_memory`` (none in ``static_control`` mode)."""
        return list(self._tools)

    async def aclose(self) -> None:
        """Wait for background writes, then close the store if this middleware owns it."""
        await self.flush()
        if self.close_store and not self._closed:
            self._closed = True
            await self.store.aclose()
        self._closed = True

    async def flush(self) -> None:
        """Wait for the background writes started on the running event loop."""
        loop = asyncio.get_running_loop()
        mine = [t for t in self._background if t.get_loop() is loop]
        foreign = [t for t in self._background if t.get_loop() is not loop and not t.done()]
        if foreign:
            logger.warning(
                "%d background memory writes belong to another event loop and cannot be "
                "awaited here; close the middleware on the loop that ran the replies",
                len(foreign),
            )
        if mine:
            await asyncio.gather(*mine, return_exceptions=True)

    # ------------------------------------------------------------- the hooks
    async def on_reply(
        self, ctx: ReplyContext, next_handler: ReplyHandler
    ) -> AsyncIterator[AgentEvent]:
        if self.static:
            injected = await self._inject(ctx)
            if injected is not None:
                yield injected
        async for event in next_handler(ctx):
            yield event
        # reached only when the loop ended normally (an exception or cancellation skips it)
        if self.static and ctx.result is not None and ctx.exit_reason in ("done", "max_iters"):
            written = await self._write_back(ctx)
            if written is not None:
                yield written

    async def on_system_prompt(self, ctx: ReplyContext, prompt: str) -> str:
        if not self.agentic:
            return prompt
        toolkit = ctx.agent.toolkit
        lines = ""
        if any(t.name == SEARCH_TOOL and toolkit.get(t.name) is t for t in self._tools):
            lines += _SEARCH_LINE
        if any(t.name == ADD_TOOL and toolkit.get(t.name) is t for t in self._tools):
            lines += _ADD_LINE
        if not lines:
            return prompt
        if self.static:
            lines += _STATIC_LINE
        return f"{prompt}\n\n{NUDGE.format(tools=lines)}"

    # ------------------------------------------------------------ static path
    async def _inject(self, ctx: ReplyContext) -> MemoryEvent | None:
        query = ctx.input.get_text_content().strip()
        if not query:
            return None
        try:
            items = await self._retrieve(query, self.top_k)
        except Exception as exc:  # reported, and the reply goes on
            logger.warning("%s: long-term memory search failed: %s", self.name, exc)
            return self._event(
                ctx.reply_id, "error", f"search failed: {exc}", {"phase": "retrieve"}
            )
        if items:
            ctx.injected.append(AssistantMsg(MEMORY_MSG_NAME, format_memories(items)))
        return self._event(
            ctx.reply_id,
            "retrieve",
            f"{count_memories(len(items))} injected" if items else "no relevant memories",
            {"query": query, "items": [item_data(i) for i in items]},
        )

    async def _write_back(self, ctx: ReplyContext) -> MemoryEvent | None:
        exchange = self.exchange(ctx)
        if not exchange:
            return None
        if not self.await_write:
            task = asyncio.get_running_loop().create_task(
                self._background_write(ctx, exchange), name=f"{self.name}-write-{ctx.reply_id}"
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return self._event(
                ctx.reply_id, "write", "write-back started in the background", {"background": True}
            )
        try:
            result = await self._record(exchange)
        except Exception as exc:  # reported, and the reply goes on
            logger.warning("%s: long-term memory write failed: %s", self.name, exc)
            return self._event(ctx.reply_id, "error", f"write failed: {exc}", {"phase": "write"})
        return self._write_event(ctx, result)

    async def _background_write(self, ctx: ReplyContext, exchange: list[Msg]) -> None:
        try:
            result = await self._record(exchange)
        except Exception as exc:  # a background task has no caller to raise to
            self.failed_background_writes += 1
            logger.warning("%s: background long-term memory write failed: %s", self.name, exc)
            ctx.emit(
                self._event(
                    ctx.reply_id, "error", f"background write failed: {exc}", {"phase": "write"}
                )
            )
            return
        ctx.emit(self._write_event(ctx, result))

    def exchange(self, ctx: ReplyContext) -> list[Msg]:
        """What static write-back stores for a finished reply: the user's input and the
        final answer (text only; never the injected memories or a framework notice)."""
        out: list[Msg] = []
        question = ctx.input.get_text_content().strip()
        if question:
            out.append(UserMsg(ctx.input.name, question))
        answer = ""
        if ctx.exit_reason == "max_iters":
            said = [
                m.get_text_content().strip()
                for m in ctx.transcript
                if m.role == "assistant" and m is not ctx.result and m.get_text_content().strip()
            ]
            answer = said[-1] if said else ""
        elif ctx.result is not None:
            answer = ctx.result.get_text_content().strip()
        if answer:
            name = ctx.result.name if ctx.result is not None else ctx.agent.name
            out.append(AssistantMsg(name, answer))
        return out

    def _write_event(self, ctx: ReplyContext, result: RecordResult) -> MemoryEvent:
        data = {
            "added": [item_data(i) for i in result.added],
            "updated": [item_data(i) for i in result.updated],
            "skipped": len(result.skipped),
        }
        n = len(result.added) + len(result.updated)
        message = (
            f"{count_memories(n)} stored" if n else "the store kept nothing new from this exchange"
        )
        return self._event(ctx.reply_id, "write", message, data)

    def _event(
        self,
        reply_id: str,
        action: Literal["retrieve", "write", "error"],
        message: str,
        data: dict[str, Any],
    ) -> MemoryEvent:
        return MemoryEvent(
            reply_id=reply_id, source=self.name, action=action, message=message, data=data
        )

    # ------------------------------------------------------------ store calls
    async def _timed(self, awaitable: Awaitable[_T], limit: float | None, what: str) -> _T:
        try:
            async with asyncio.timeout(limit):
                return await awaitable
        except TimeoutError as exc:
            if limit is None:
                raise MemoryStoreError(f"{what} timed out: {exc}") from exc
            raise MemoryStoreError(f"{what} timed out after {limit:g} s") from None

    async def _retrieve(self, query: str, limit: int) -> list[MemoryItem]:
        return await self._timed(
            self.store.retrieve(
                query,
                user_id=self.user_id,
                agent_id=self.search_agent_id,
                run_id=self.run_id,
                limit=limit,
                threshold=self.threshold,
            ),
            self.search_timeout,
            "the memory search",
        )

    async def _record(self, content: Any, infer: bool | None = None) -> RecordResult:
        return await self._timed(
            self.store.record(
                content,
                user_id=self.user_id,
                agent_id=self.agent_id,
                run_id=self.run_id,
                infer=infer,
            ),
            self.write_timeout,
            "the memory write",
        )

    # ------------------------------------------------------------------ tools
    async def search_memory(
        self, keywords: list[str], limit: int | None = None, ctx: ToolContext | None = None
    ) -> ToolResult:
        """The ``search_memory`` tool: each keyword its own query; merged by id, best score."""
        return await run_search_memory(self, keywords, limit, ctx)

    async def add_memory(
        self, thinking: str, content: list[str], ctx: ToolContext | None = None
    ) -> ToolResult:
        """The ``add_memory`` tool: each sentence of ``content`` becomes its own memory."""
        return await run_add_memory(self, thinking, content, ctx)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(store={self.store!r}, user_id={self.user_id!r}, "
            f"mode={self.mode!r}, agent_id={self.agent_id!r})"
        )


def format_memories(items: list[MemoryItem]) -> str:
    """The text of the injected ``AssistantMsg(name="memory")``: one line per memory."""
    lines = [
        "Long-term memories that may be relevant to the next message (from earlier conversations):"
    ]
    lines += [f"- {one_line(i.content)}" for i in items]
    return "\n".join(lines)
