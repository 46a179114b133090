"""Tools: what the model can call.

A tool declares a ``name``, a ``description``, an input model (a pydantic model whose
JSON schema is shown to the model and which validates the arguments), whether it only
reads, whether its calls may overlap with other calls of the same model step, and which
paths a call touches (for the permission engine).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from mnemoscope.message import ImageBlock, TextBlock
from mnemoscope.model import ToolSchema
from mnemoscope.tool._threads import ToolThreadPool, default_tool_pool

if TYPE_CHECKING:
    from mnemoscope.events import AgentEvent
    from mnemoscope.message import Msg
    from mnemoscope.permission import PermissionContext, PermissionDecision
    from mnemoscope.tool._compact_tool import CompactOutcome

T = TypeVar("T")


class ToolResult(BaseModel):
    """What a tool returns. ``is_error`` results are shown to the model as errors."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    output: str | list[TextBlock | ImageBlock] = ""
    is_error: bool = False
    metadata: dict[str, Any] = {}

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls(output=message, is_error=True)


@dataclass(frozen=True)
class PathAccess:
    """A path a tool call will read or write, for the permission engine."""

    path: str
    access: Literal["read", "write"]


@dataclass
class ToolContext:
    """Everything a tool call may need besides its arguments.

    Attributes:
        tool_use_id: id of the :class:`~mnemoscope.message.ToolUseBlock` being executed.
        permission_context: the agent's permission context (working directories, mode).
        reply_id: the reply this call belongs to (``""`` when called outside an agent).
        emit: reports an event (e.g. a ``MemoryEvent``) on the reply's stream; ``None``
            outside an agent.
        stored_messages: the session's stored messages that carry a mark (the agent's
            short-term memory; ``None`` outside an agent).
        recall: searches earlier turns of the conversation (the agent's context engine;
            ``None`` outside an agent); takes the query and ``limit``, ``only_cut`` and
            ``max_chars`` keywords.
        compact: compacts the conversation so far (the agent's context engine; ``None``
            outside an agent), as the ``compact_context`` tool asks.
        state: per-agent scratch space shared by tools across replies (e.g. which files
            were read and at which version, used by Write/Edit's read-before-write check).
        thread_pool: where :meth:`run_blocking` runs blocking code: the toolkit's own
            bounded pool (``None``: a shared bounded pool, never the loop's executor).
    """

    tool_use_id: str = ""
    permission_context: PermissionContext | None = None
    reply_id: str = ""
    emit: Callable[[AgentEvent], None] | None = None
    stored_messages: Callable[[str], Awaitable[list[Msg]]] | None = None
    recall: Callable[..., Awaitable[str]] | None = None
    compact: Callable[[], Awaitable[CompactOutcome]] | None = None
    state: dict[str, Any] = field(default_factory=dict)
    thread_pool: ToolThreadPool | None = None

    async def run_blocking(self, func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run blocking code for a tool off the event loop, in the toolkit's thread pool.

        Use this instead of ``asyncio.to_thread`` in tools: a call that hangs then only
        holds a thread of the toolkit's bounded pool, and the call's timeout abandons it
        (see :class:`~mnemoscope.tool.Toolkit`).
        """
        pool = self.thread_pool or default_tool_pool()
        return await pool.run(func, *args, **kwargs)


class ToolBase(ABC):
    """Base class of every tool.

    Subclasses set ``name``, ``description`` and ``Input`` (a pydantic model) and
    implement :meth:`call`.
    """

    name: str = ""
    description: str = ""
    Input: ClassVar[type[BaseModel]]
    is_read_only: bool = False
    auto_allow: bool = False
    """When True the tool allows itself in the permission engine (e.g. memory tools)."""
    timeout: float | None = None
    """Seconds one call may take; ``None`` uses the toolkit's default (``Toolkit(timeout=)``)."""
    concurrency_safe: bool | None = None
    """Whether calls of this tool may run at the same time as the other concurrency-safe
    calls of one model step. ``None`` (the default): safe exactly when ``is_read_only``.
    Set ``False`` for a read-only tool that must not overlap (a rate-limited API), ``True``
    for a writing tool whose calls are independent of each other."""

    @property
    def is_concurrency_safe(self) -> bool:
        """``concurrency_safe``, or ``is_read_only`` when it is ``None``."""
        if self.concurrency_safe is None:
            return bool(self.is_read_only)
        return bool(self.concurrency_safe)

    def schema(self) -> ToolSchema:
        """The provider-neutral schema shown to the model (built once per tool)."""
        key = (self.name, self.description, self.Input)
        cached = self.__dict__.get("_schema_cache")
        if cached is None or cached[0] != key:
            schema = self.Input.model_json_schema()
            schema.pop("title", None)
            built: ToolSchema = {
                "name": self.name,
                "description": self.description,
                "input_schema": schema,
            }
            cached = (key, built)
            self.__dict__["_schema_cache"] = cached
        return cached[1]

    def permission_paths(
        self, tool_input: BaseModel, ctx: ToolContext | None = None
    ) -> list[PathAccess]:
        """Paths this call touches, as :meth:`call` will resolve them; default: none.

        Args:
            tool_input: the validated input.
            ctx: the call's context when there is one (the agent passes it), so relative
                paths can resolve against ``ctx.permission_context.cwd``; an override
                written with only ``tool_input`` still works.
        """
        return []

    async def check_permissions(
        self, tool_input: BaseModel, ctx: ToolContext
    ) -> PermissionDecision | None:
        """A tool-specific decision, or ``None`` to let the engine decide."""
        return None

    @abstractmethod
    async def call(self, tool_input: Any, ctx: ToolContext) -> ToolResult:
        """Run the tool on validated input."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def permission_paths_of(
    tool: ToolBase, tool_input: BaseModel, ctx: ToolContext | None
) -> list[PathAccess]:
    """``tool.permission_paths(tool_input, ctx)``, or without ``ctx`` for an override
    that takes only the input (written before ``ctx`` existed)."""
    method = tool.permission_paths
    key = getattr(method, "__func__", method)
    try:
        how = _CONTEXT_ARG.get(key)
    except TypeError:  # an unhashable callable set on the instance
        key, how = None, None
    if how is None:
        how = _context_arg(method)
        if key is not None and len(_CONTEXT_ARG) < 1024:
            _CONTEXT_ARG[key] = how
    if how == "keyword":
        return method(tool_input, ctx=ctx)
    if how == "positional":
        return method(tool_input, ctx)
    return method(tool_input)


_CONTEXT_ARG: dict[Any, str] = {}
"""Per ``permission_paths`` function: how it takes ``ctx`` (keyword, positional, none)."""


def _context_arg(method: Callable[..., Any]) -> str:
    try:
        params = list(inspect.signature(method).parameters.values())  # bound: no self
    except (TypeError, ValueError):
        return "positional"
    if any(p.name == "ctx" and p.kind is not p.POSITIONAL_ONLY for p in params):
        return "keyword"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params):
        return "positional"
    return "none"
