"""Agentic memory: Markdown long-term memory that the agent keeps itself.

Example::

    from mnemoscope.agent import Agent
    from mnemoscope.middleware import AgenticMemoryMiddleware
    from mnemoscope.tool import Edit, Read, Toolkit, Write

    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=my_chat_model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
        middlewares=[AgenticMemoryMiddleware(workdir="/tmp/ltm_demo")],
    )
    await agent.reply("Remember that I live in Hangzhou and prefer concise Chinese answers.")

Memory lives in ``<workdir>/Memory/``: ``MEMORY.md`` (the index, one line per memory)
and one Markdown file per memory with YAML frontmatter ``name``, ``description`` and
``type`` (``user``, ``feedback``, ``project``, ``reference``). The agent writes them with
its Read/Write/Edit tools, following instructions this middleware adds to the system
prompt together with the (bounded) index.

Retrieval has two paths. The model reads the files the index points to. And when a reply
starts, a task owned by that reply picks relevant files (a local BM25 ranker narrows the
candidates, then the retrieval model chooses by structured output, or the ranker alone
with ``selection="local"``); before each reasoning step the finished result is injected
as a :class:`~mnemoscope.message.HintBlock` holding those files. The first step waits up
to ``retrieval_wait`` seconds for it, so a reply answered in one model call still gets
the memories when retrieval is fast; later steps take it only if it is done.

The system prompt costs a few ``lstat`` calls per reply when nothing changed (the
confinement check, ``MEMORY.md``, the memory directory): the index is read again only when
it changes, the rendered section is cached, and no memory file is looked at. Files with
invalid frontmatter are listed from the latest directory scan that has *completed*. A
reply starts a new scan (in the background; only changed files are parsed again) only
when something may have changed (:meth:`MemoryStore.refresh_if_stale`): a write through
this library (the agent's Write/Edit, the store, ``mnemoscope memory``), a directory whose
mtime, ctime or inode moved (any file created, removed, renamed or rewritten by renaming),
or ``full_check_interval`` seconds (30) since the last scan, which is how a file another
program edited in place is seen. The prompt uses this reply's scan if it is already done,
else the previous one, and never waits for one (the first prompt of a middleware lists
no invalid files yet); if this reply's scan then finishes with a different list of
invalid files, the prompt is rebuilt before the next reasoning step (as when
``MEMORY.md`` changes). Retrieval waits for its reply's scan. The agent's own bad writes
are flagged at once in the Write/Edit result.

Confinement: ``<workdir>/Memory`` must resolve strictly inside the workdir (a link to
another directory of the workdir is fine). On the local disk this is checked when the
agent is built (:class:`~mnemoscope.errors.UserError` otherwise), on other backends at
the start of each reply; and again before every model call and every tool call. When the
check fails (say, a tool replaced ``Memory`` by a link to ``/``), the working-directory
grant is withdrawn at once, memory is disabled for the rest of the reply and a
``MemoryEvent(action="error")`` says why; the next reply checks again. Files are read
at their real paths inside that directory, links refused: a ``MEMORY.md`` that is a link
stays out of the prompt.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

from mnemoscope.errors import MemoryStoreError, MnemoscopeError, UserError
from mnemoscope.events import AgentEvent, MemoryEvent
from mnemoscope.memory.markdown import (
    DEFAULT_FULL_CHECK_INTERVAL,
    DEFAULT_MEMORY_INSTRUCTIONS,
    DEFAULT_RETRIEVAL_INSTRUCTIONS,
    INDEX_FILENAME,
    MAX_INDEX_BYTES,
    MAX_INDEX_LINE_CHARS,
    MEMORY_DIRNAME,
    IndexSnapshot,
    IndexView,
    MemoryStore,
    ScanResult,
    bound_index,
    check_full_check_interval,
    parse_index,
    parse_memory_file,
    render_hint,
    render_index_section,
)
from mnemoscope.message import HintBlock
from mnemoscope.middleware._agentic_retrieval import (
    MemorySelector,
    RetrievalResult,
)
from mnemoscope.middleware._base import (
    ActingHandler,
    MiddlewareBase,
    ReasoningHandler,
    ReplyHandler,
)
from mnemoscope.middleware._context import ActingContext, ReasoningContext, ReplyContext
from mnemoscope.model import count_tokens
from mnemoscope.tool import record_read

if TYPE_CHECKING:
    from mnemoscope.middleware._view import AgentView
    from mnemoscope.model import ChatModelBase
    from mnemoscope.workspace import BackendBase

logger = logging.getLogger("mnemoscope.memory.agentic")

SOURCE = "agentic_memory"
"""``source`` of the hints and memory events of this middleware."""

DEFAULT_RETRIEVAL_WAIT = 1.0
"""Seconds the first reasoning step waits for retrieval (then it proceeds without it)."""

GRANT_SOURCE = "agentic-memory"
"""``source`` of the working-directory grant of the memory directory."""

_READ_TOOLS = frozenset({"Read"})
_WRITE_TOOLS = frozenset({"Write", "Edit"})


class AgenticMemoryMiddleware(MiddlewareBase):
    """Markdown long-term memory the agent keeps itself (see the module docstring).

    Args:
        workdir: the working directory; memories live in ``<workdir>/Memory/``.
        backend: a workspace backend (``LocalBackend``, Docker, E2B, ...); ``None`` is the
            local disk.
        retrieval_model: the model that selects memories; ``None`` uses the replying
            agent's model.
        selection: ``"llm"`` (BM25 pre-selection, then the retrieval model chooses) or
            ``"local"`` (the BM25 ranker alone, no model call).
        retrieval: start the automatic retrieval at each reply (``False``: the model only
            reads what the index points to).
        retrieval_wait: seconds the first reasoning step of a reply waits for retrieval
            (default :data:`DEFAULT_RETRIEVAL_WAIT`); ``0`` never waits.
        max_selected: most memory files injected per reply.
        manifest_max_files: most files shown to the retrieval model; with more memories
            the BM25 ranker chooses which (then the newest fill the remaining places).
        index_max_lines: line budget of the index in the system prompt.
        index_max_tokens: token budget of the index in the system prompt.
        hint_max_tokens_per_file: each injected file is cut to this many tokens.
        memory_dirname: the directory name under ``workdir``.
        full_check_interval: seconds after which a reply walks the whole memory directory
            even when no directory of it changed, to see files other programs edited in
            place (default :data:`DEFAULT_FULL_CHECK_INTERVAL`, 30; ``0``: every reply).
            Files created, removed, renamed or written by this library are seen at the
            next reply whatever the interval.
        instructions: replaces the default memory instructions (``{memory_dir}`` and
            ``{index_path}`` are filled in).
        retrieval_instructions: replaces the selection instructions (``{max_selected}``).
    """

    def __init__(
        self,
        workdir: str,
        backend: BackendBase | None = None,
        *,
        retrieval_model: ChatModelBase | None = None,
        selection: Literal["llm", "local"] = "llm",
        retrieval: bool = True,
        retrieval_wait: float = DEFAULT_RETRIEVAL_WAIT,
        max_selected: int = 5,
        manifest_max_files: int = 100,
        index_max_lines: int = 200,
        index_max_tokens: int = 4_000,
        hint_max_tokens_per_file: int = 2_000,
        memory_dirname: str = MEMORY_DIRNAME,
        full_check_interval: float = DEFAULT_FULL_CHECK_INTERVAL,
        instructions: str | None = None,
        retrieval_instructions: str | None = None,
    ) -> None:
        if not isinstance(workdir, str | os.PathLike) or not str(workdir):
            raise UserError("AgenticMemoryMiddleware: workdir must be a non-empty path")
        if selection not in ("llm", "local"):
            raise UserError(
                f"AgenticMemoryMiddleware: selection must be 'llm' or 'local', got {selection!r}"
            )
        if retrieval_wait < 0:
            raise UserError(
                "AgenticMemoryMiddleware: retrieval_wait must be >= 0 seconds, "
                f"got {retrieval_wait}"
            )
        for pname, value in (
            ("max_selected", max_selected),
            ("manifest_max_files", manifest_max_files),
            ("index_max_lines", index_max_lines),
            ("index_max_tokens", index_max_tokens),
            ("hint_max_tokens_per_file", hint_max_tokens_per_file),
        ):
            if value < 1:
                raise UserError(f"AgenticMemoryMiddleware: {pname} must be at least 1, got {value}")
        check_full_check_interval(full_check_interval, "AgenticMemoryMiddleware")
        self.store = MemoryStore(
            str(workdir),
            backend,
            memory_dirname=memory_dirname,
            full_check_interval=full_check_interval,
        )
        self.backend = backend
        self.retrieval_model = retrieval_model
        self.selection = selection
        self.retrieval = retrieval
        self.retrieval_wait = retrieval_wait
        self.max_selected = max_selected
        self.manifest_max_files = manifest_max_files
        self.index_max_lines = index_max_lines
        self.index_max_tokens = index_max_tokens
        self.hint_max_tokens_per_file = hint_max_tokens_per_file
        self.instructions = instructions or DEFAULT_MEMORY_INSTRUCTIONS
        self.retrieval_instructions = retrieval_instructions or DEFAULT_RETRIEVAL_INSTRUCTIONS
        self._selector = MemorySelector(self.store, self)
        # the last rendered index section and what it was rendered from (disk state only)
        self._section_cache: tuple[tuple[Any, ...], IndexView, str] | None = None

    @property
    def workdir(self) -> str:
        return self.store.workdir

    @property
    def memory_dir(self) -> str:
        """``<workdir>/Memory``."""
        return self.store.memdir

    @property
    def index_path(self) -> str:
        """``<workdir>/Memory/MEMORY.md``."""
        return self.store.index_path

    # ------------------------------------------------------------- lifecycle
    def setup(self, agent: AgentView) -> None:
        """Grant the agent access to the memory directory.

        Reads there are always allowed; writes follow the agent's permission mode (asked
        in ``DEFAULT``, allowed in ``ACCEPT_EDITS``, denied in ``PLAN``). The grant is the
        directory's real path.

        Raises:
            UserError: on the local disk, the memory directory resolves outside the
                workdir (e.g. ``Memory`` is a link to ``/``) or is not a directory. Other
                backends are checked when a reply starts.
        """
        if self.store.is_local:
            try:
                root = self.store.confine_sync()
            except MemoryStoreError as exc:
                raise UserError(f"AgenticMemoryMiddleware: {exc}") from None
        else:
            root = self.memory_dir
        self._grant(agent, root)

    def _grant(self, agent: AgentView, root: str) -> None:
        from mnemoscope.permission import AdditionalWorkingDirectory

        dirs = agent.state.permission_context.working_directories
        current = dirs.get(self.memory_dir)
        if current is None or current.path != root:
            dirs[self.memory_dir] = AdditionalWorkingDirectory(path=root, source=GRANT_SOURCE)

    def _withdraw(self, agent: AgentView) -> None:
        dirs = agent.state.permission_context.working_directories
        current = dirs.get(self.memory_dir)
        if current is not None and current.source == GRANT_SOURCE:
            del dirs[self.memory_dir]

    async def _guard(self, ctx: ReplyContext) -> bool:
        """Check confinement now; on failure withdraw the grant and disable memory for
        the rest of the reply (reported once). Returns whether memory may be used."""
        st = ctx.state_for(self)
        if st.get("disabled"):
            return False
        try:
            root = await self.store.confine()
        except (MnemoscopeError, OSError) as exc:
            self._withdraw(ctx.agent)
            st["disabled"] = str(exc)
            self._report(ctx, f"long-term memory is disabled for this reply: {exc}")
            return False
        self._grant(ctx.agent, root)
        return True

    # ----------------------------------------------------------- onion hooks
    async def on_reply(
        self, ctx: ReplyContext, next_handler: ReplyHandler
    ) -> AsyncIterator[AgentEvent]:
        st = ctx.state_for(self)
        st.update(read=set(), injected=set(), checkpoints=0, consumed=False, disabled="")
        if not await self._guard(ctx):
            async for event in next_handler(ctx):
                yield event
            return
        try:
            await self.store.ensure_layout()
        except (MnemoscopeError, OSError) as exc:
            self._report(ctx, f"cannot create {self.index_path}: {exc}")
        # the latest scan when nothing changed (a few stats), else a new one in the
        # background, owned by the store (a cache of the disk): it outlives the reply
        st["scan"] = self.store.refresh_if_stale()
        query = ctx.input.get_text_content().strip()
        if self.retrieval and query:
            st["retrieval"] = ctx.spawn(
                self._retrieve(ctx, query, st["scan"]),
                name=f"agentic-memory-retrieval-{ctx.reply_id}",
            )
        try:
            async for event in next_handler(ctx):
                yield event
        finally:
            for key in ("scan", "retrieval"):
                task = st.get(key)
                if task is not None and task.done() and not task.cancelled():
                    task.exception()  # retrieved: a failure was reported, not left to the GC

    async def on_reasoning(
        self, ctx: ReasoningContext, next_handler: ReasoningHandler
    ) -> AsyncIterator[AgentEvent]:
        reply = ctx.reply
        st = reply.state_for(self)
        # before every model call: a tool may have replaced the directory by a link
        enabled = await self._guard(reply)
        task: asyncio.Task[RetrievalResult] | None = st.get("retrieval")
        if enabled and task is not None and not st["consumed"]:
            first = st["checkpoints"] == 0
            st["checkpoints"] += 1
            if first and not task.done() and self.retrieval_wait > 0:
                # asyncio.wait does not cancel the task on timeout: a later step may use it
                await asyncio.wait({task}, timeout=self.retrieval_wait)
            if task.done():
                st["consumed"] = True
                self._inject(reply, task, st)
        async for event in next_handler(ctx):
            yield event

    async def on_acting(
        self, ctx: ActingContext, next_handler: ActingHandler
    ) -> AsyncIterator[AgentEvent]:
        # before every tool call too (an earlier call of the same step may have planted a
        # link): the permission decision inside next_handler then no longer has the grant
        enabled = await self._guard(ctx.reply)
        async for event in next_handler(ctx):
            yield event
        name = ctx.tool_use.name
        if not enabled:
            return
        if name not in _READ_TOOLS and name not in _WRITE_TOOLS:
            return
        filename = self._memory_filename(ctx.reply, ctx.tool_use.input)
        if filename is not None and name in _WRITE_TOOLS:
            self.store.note_write()  # whatever the timestamps say, the next check walks
        if filename is None or ctx.result is None or ctx.result.is_error:
            return
        st = ctx.reply.state_for(self)
        st.setdefault("read", set()).add(filename)  # what it read or wrote needs no hint
        if name in _WRITE_TOOLS and filename != INDEX_FILENAME:
            # walk now, in the background: the next reply's prompt then lists what was
            # written (an invalid file) instead of the scan from before the write
            self.store.refresh()
            note = await self._check_written(filename)
            if note:
                text = ctx.result.output_text()
                ctx.result = ctx.result.model_copy(update={"output": f"{text}\n\n{note}".strip()})

    # --------------------------------------------------------- system prompt
    async def on_system_prompt(self, ctx: ReplyContext, prompt: str) -> str:
        st = ctx.state_for(self)
        st["prompt_disabled"] = bool(st.get("disabled"))
        if st.get("disabled"):
            note = (
                "# Long-term memory\n\nLong-term memory is unavailable in this reply "
                f"(its directory {self.memory_dir} failed a safety check). Do not read or "
                "write it; tell the user if they ask about memories."
            )
            return f"{prompt.rstrip()}\n\n{note}" if prompt.strip() else note
        try:
            index = await self.store.read_index_cached()
        except (MnemoscopeError, OSError) as exc:
            self._report(ctx, f"the index is not shown: {exc}")
            try:  # the entry's own version: the prompt is rebuilt when it changes
                cheap = await self.store.index_version()
            except (MnemoscopeError, OSError):
                cheap = "unreadable"
            index = IndexSnapshot("", cheap, "", self.index_path)
        st["index_version"] = index.cheap_version
        scan = await self._scan_for_prompt(ctx, st)
        invalid = scan.invalid if scan is not None else []
        st["invalid_signature"] = scan.invalid_signature if scan is not None else ()
        counter = _token_counter(ctx.agent)
        key = (index.cheap_version, index.version, st["invalid_signature"])
        cached = self._section_cache
        if cached is not None and cached[0] == (*key, counter):
            view, section = cached[1], cached[2]
        else:
            view = bound_index(
                index.text,
                max_lines=self.index_max_lines,
                max_tokens=self.index_max_tokens,
                count_tokens=counter,
            )
            section = render_index_section(
                view,
                index_path=self.index_path,
                invalid=invalid,
                size=index.size,
                read_bytes=index.read_bytes,
                long_lines=index.long_lines,
                max_bytes=MAX_INDEX_BYTES,
                max_line_chars=MAX_INDEX_LINE_CHARS,
            )
            # the counter is kept (a strong reference): another model is another key
            self._section_cache = ((*key, counter), view, section)
        if not view.truncated and index.complete and index.version:
            # The model sees the whole index in its prompt: count that as having read it,
            # so the documented "Edit MEMORY.md" step works without a prior Read (the
            # tools still refuse the edit if the index changes on disk in between).
            record_read(
                ctx.agent.state.tool_state,
                self.store.resolved_backend,
                index.real_path,
                index.version,
            )
        memory = self.instructions.replace("{memory_dir}", self.memory_dir).replace(
            "{index_path}", self.index_path
        )
        return (
            f"{prompt.rstrip()}\n\n{memory.rstrip()}\n\n{section}"
            if prompt.strip()
            else f"{memory.rstrip()}\n\n{section}"
        )

    async def _scan_for_prompt(self, ctx: ReplyContext, st: dict[str, Any]) -> ScanResult | None:
        """This reply's scan if done, else the latest completed one (``None`` before the
        first: the prompt never waits for a walk of the directory)."""
        task: asyncio.Future[ScanResult] | None = st.get("scan")
        if task is not None and task.done() and not task.cancelled() and not task.exception():
            st["scan_stale"] = False
            return task.result()
        if task is None:  # called outside on_reply (a test, a benchmark)
            st["scan"] = task = self.store.refresh_if_stale()
            if task.done():
                st["scan_stale"] = False
                return task.result()
        # compared when it is done: the prompt is rebuilt if its invalid files differ
        st["scan_stale"] = True
        return self.store.last_scan

    async def system_prompt_changed(self, ctx: ReplyContext) -> bool:
        st = ctx.state_for(self)
        if bool(st.get("disabled")) != bool(st.get("prompt_disabled")):
            return True
        if st.get("disabled"):
            return False
        if "index_version" not in st:
            return True
        task: asyncio.Future[ScanResult] | None = st.get("scan")
        if st.get("scan_stale") and task is not None and task.done():
            st["scan_stale"] = False  # compared once, when this reply's scan is done
            exc = None if task.cancelled() else task.exception()
            if isinstance(exc, MnemoscopeError | OSError) and st.get("retrieval") is None:
                # (with retrieval on, its failure says so)
                self._report(ctx, f"cannot scan {self.memory_dir}: {exc}")
            elif (
                exc is None
                and not task.cancelled()
                and task.result().invalid_signature != st.get("invalid_signature")
            ):
                return True
        try:
            return await self.store.index_version() != st["index_version"]
        except (MnemoscopeError, OSError):
            return False

    # ------------------------------------------------------------- retrieval
    async def select(self, query: str, *, model: ChatModelBase | None = None) -> RetrievalResult:
        """Run the retrieval outside an agent (used by tests, the CLI and the benchmark)."""
        return await self._selector.select(query, await self.store.scan(), model)

    async def _retrieve(
        self, ctx: ReplyContext, query: str, scan_task: asyncio.Future[ScanResult]
    ) -> RetrievalResult:
        scan = await asyncio.shield(scan_task)
        return await self._selector.select(query, scan, self.retrieval_model or ctx.agent.model)

    def _inject(
        self, reply: ReplyContext, task: asyncio.Task[RetrievalResult], st: dict[str, Any]
    ) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._report(reply, f"memory retrieval failed: {type(exc).__name__}: {exc}")
            return
        result = task.result()
        if result.total == 0 and not result.fallback_reason:
            return  # no memories saved yet: nothing to report
        if result.fallback_reason:
            self._report(
                reply,
                f"retrieval model failed ({result.fallback_reason}); used the local ranker instead",
            )
        skipped = [
            mf.filename for mf, _ in result.files if mf.filename in st["read"] | st["injected"]
        ]
        files = [(mf, text) for mf, text in result.files if mf.filename not in skipped]
        data = {
            "files": [mf.filename for mf, _ in files],
            "skipped_already_seen": skipped,
            "mode": result.mode,
            "candidates": result.candidates,
            "total": result.total,
        }
        if files:
            st["injected"].update(mf.filename for mf, _ in files)
            reply.add_hint(HintBlock(hint=render_hint(files, now=time.time()), source=SOURCE))
        reply.emit(
            MemoryEvent(
                source=SOURCE,
                action="retrieve",
                message=f"{len(files)} memories injected",
                data=data,
            )
        )

    # -------------------------------------------------------------- helpers
    def _memory_filename(self, reply: ReplyContext, tool_input: dict[str, Any]) -> str | None:
        path = tool_input.get("file_path") or tool_input.get("path")
        if not isinstance(path, str) or not path:
            return None
        if not path.startswith("/") and self.backend is None:
            path = os.path.join(reply.agent.state.permission_context.cwd, path)
        return self.store.filename_of(path)

    async def _check_written(self, filename: str) -> str:
        """A note for the model after it wrote a memory file (bad frontmatter, no index line)."""
        try:
            text = await self.store.read_text(filename)
            index = await self.store.read_index()
        except (FileNotFoundError, MnemoscopeError, OSError):
            return ""
        index_text = index.text
        mf = parse_memory_file(filename, self.store.path_of(filename), text)
        notes = []
        if not mf.valid:
            notes.append(
                f"Warning: {filename} has invalid memory frontmatter ({'; '.join(mf.errors)}). "
                "It will not be found by retrieval until you fix it: start the file with '---', "
                "then name, description and type (user, feedback, project or reference), "
                "then '---'."
            )
        # a partly read index may hold the line further down: no reminder then
        if index.complete and filename not in {e.target for e in parse_index(index_text)}:
            notes.append(f"Reminder: add a line for {filename} to {self.index_path}.")
        return "\n".join(notes)

    def _report(self, ctx: ReplyContext, message: str) -> None:
        logger.warning("agentic memory (%s): %s", self.memory_dir, message)
        ctx.emit(MemoryEvent(source=SOURCE, action="error", message=message))

    def __repr__(self) -> str:
        return f"AgenticMemoryMiddleware(workdir={self.workdir!r}, selection={self.selection!r})"


def _token_counter(agent: AgentView) -> Any:
    model = getattr(agent, "model", None)
    return model.count_tokens if model is not None else count_tokens
