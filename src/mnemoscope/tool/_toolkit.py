"""The :class:`Toolkit`: the tools an agent may call, their schemas and safe execution.

Safe execution means the agent loop never crashes on a tool: an exception (any
``BaseException`` but the caller's cancellation, ``KeyboardInterrupt`` and
``SystemExit``), a value that cannot be shown, or a call that runs past its time limit
becomes an error result the model reads. Sync tools run on the toolkit's own bounded pool
of daemon threads (:class:`~mnemoscope.tool._threads.ToolThreadPool`), never on the event
loop's default executor, so hung tools cannot starve ``asyncio.to_thread`` users.

Concurrency: the agent runs consecutive calls of one model step whose tools are
concurrency-safe (:meth:`Toolkit.is_concurrency_safe`: read-only tools by default, but
sync function tools only when they opt in) at the same time, each under its own time
limit; sync ones share the ``max_tool_threads`` bound (a call waiting for a thread
spends its own time limit).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

import pydantic

from mnemoscope.errors import UserError
from mnemoscope.message import ToolResultBlock, ToolUseBlock
from mnemoscope.model import RAW_ARGUMENTS_KEY, ToolSchema
from mnemoscope.tool._base import ToolBase, ToolContext, ToolResult
from mnemoscope.tool._function import FunctionTool, to_text
from mnemoscope.tool._output import (
    MIN_OUTPUT_CHARS,
    cap_output,
    describe_exception,
    must_propagate,
)
from mnemoscope.tool._threads import ToolThreadPool

logger = logging.getLogger("mnemoscope.tool")

DEFAULT_TIMEOUT = 300.0
"""Seconds a tool call may take unless the tool or the toolkit says otherwise."""
DEFAULT_MAX_OUTPUT_CHARS = 40_000
"""Characters of one tool result sent to the model (head and tail kept)."""


class Toolkit:
    """A named set of tools.

    Args:
        tools: :class:`ToolBase` instances or plain functions (wrapped in
            :class:`FunctionTool`).
        timeout: seconds a call may take when the tool sets no ``timeout`` of its own
            (``None``: no limit). A call past its limit is reported to the model as an
            error; a sync tool's thread is abandoned (Python cannot stop it) and no longer
            counts against ``max_tool_threads``.
        max_tool_threads: how many sync (blocking) tool calls run at once, on daemon
            threads owned by this toolkit.
        max_output_chars: characters of one result shown to the model; a longer output
            keeps its head and tail with a marker saying how much was cut (see
            :meth:`limit_output`; the agent lowers this further to fit
            ``max_context_tokens``).

    Example::

        toolkit = Toolkit(tools=[Read(), Write(), Edit(), get_weather], timeout=60)
    """

    def __init__(
        self,
        tools: Iterable[ToolBase | Callable[..., Any]] | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        max_tool_threads: int = 8,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> None:
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise UserError(
                f"Toolkit(timeout=...) must be a positive number of seconds or None "
                f"(no limit), got {timeout!r}"
            )
        if isinstance(max_tool_threads, bool) or not isinstance(max_tool_threads, int):
            raise UserError(
                f"Toolkit(max_tool_threads=...) must be an int, got {max_tool_threads!r}"
            )
        if not isinstance(max_output_chars, int) or max_output_chars < MIN_OUTPUT_CHARS:
            raise UserError(
                f"Toolkit(max_output_chars=...) must be an int >= {MIN_OUTPUT_CHARS}, "
                f"got {max_output_chars!r}"
            )
        self.timeout = None if timeout is None else float(timeout)
        self.max_output_chars = max_output_chars
        self.thread_pool = ToolThreadPool(max_tool_threads)
        self._tools: dict[str, ToolBase] = {}
        self._schemas: list[ToolSchema] | None = None
        for tool in tools or []:
            self.add(tool)

    def add(self, tool: ToolBase | Callable[..., Any]) -> ToolBase:
        """Register a tool; a second tool with the same name is an error."""
        if not isinstance(tool, ToolBase):
            tool = FunctionTool(tool)
        if not tool.name:
            raise UserError(f"{tool!r} has no name; set the 'name' attribute")
        if tool.name in self._tools:
            raise UserError(f"two tools are named {tool.name!r}; give one of them another name")
        if tool.timeout is not None and not (
            isinstance(tool.timeout, int | float) and tool.timeout > 0
        ):
            raise UserError(
                f"tool {tool.name!r}: timeout must be a positive number of seconds or None "
                f"(the toolkit's default), got {tool.timeout!r}"
            )
        if tool.concurrency_safe is not None and not isinstance(tool.concurrency_safe, bool):
            raise UserError(
                f"tool {tool.name!r}: concurrency_safe must be True, False or None "
                f"(the default), got {tool.concurrency_safe!r}"
            )
        self._tools[tool.name] = tool
        self._schemas = None
        return tool

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)
        self._schemas = None

    def get(self, name: str) -> ToolBase | None:
        return self._tools.get(name)

    @property
    def tools(self) -> list[ToolBase]:
        return list(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[ToolSchema]:
        """Schemas of every tool, in registration order."""
        if self._schemas is None:
            self._schemas = [t.schema() for t in self._tools.values()]
        return list(self._schemas)

    # ---------------------------------------------------------------- execution
    def prepare(
        self, tool_use: ToolUseBlock
    ) -> tuple[ToolBase, pydantic.BaseModel] | ToolResultBlock:
        """Find the tool and validate its input, or return the error result for the model."""
        tool = self._tools.get(tool_use.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return _error(tool_use, f"Unknown tool {tool_use.name!r}. Available tools: {known}.")
        if RAW_ARGUMENTS_KEY in tool_use.input:
            raw = str(tool_use.input[RAW_ARGUMENTS_KEY])[:200]
            return _error(
                tool_use,
                f"The arguments for {tool.name} were not a valid JSON object: {raw!r}. "
                "Call the tool again with a JSON object matching its schema.",
            )
        try:
            return tool, tool.Input.model_validate(tool_use.input)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
            )
            return _error(
                tool_use,
                f"Invalid input for {tool.name}: {problems}. Fix the arguments and call again.",
            )
        except Exception as exc:  # a validator of the tool's input model raised
            return _error(
                tool_use,
                f"Invalid input for {tool.name}: {describe_exception(exc)}. "
                "Fix the arguments and call again.",
            )

    def is_concurrency_safe(self, tool_use: ToolUseBlock) -> bool:
        """Whether this call may run at the same time as the other concurrency-safe calls
        of its step: its tool's :attr:`~ToolBase.is_concurrency_safe`. A call of an
        unknown tool is safe (it only produces an error result)."""
        tool = self._tools.get(tool_use.name)
        return tool is None or tool.is_concurrency_safe

    def timeout_for(self, tool: ToolBase) -> float | None:
        """The time limit of one call of ``tool``: its own ``timeout``, else the toolkit's."""
        return tool.timeout if tool.timeout is not None else self.timeout

    def limit_output(
        self, result: ToolResultBlock, max_chars: int | None = None
    ) -> tuple[ToolResultBlock, str | None]:
        """Bound what of ``result`` reaches the model (the agent calls this on every result).

        Args:
            result: a tool result.
            max_chars: a tighter limit than ``max_output_chars`` (e.g. from a context
                budget); never below ``MIN_OUTPUT_CHARS``.

        Returns:
            ``(result_to_send, full_text)``: ``full_text`` is ``None`` when nothing was
            cut, else the whole text (bounded) to store next to the result, not to send.
        """
        limit = (
            self.max_output_chars if max_chars is None else min(max_chars, self.max_output_chars)
        )
        return cap_output(result, max(limit, MIN_OUTPUT_CHARS))

    async def execute(
        self,
        tool: ToolBase,
        tool_input: pydantic.BaseModel,
        tool_use: ToolUseBlock,
        ctx: ToolContext,
    ) -> ToolResultBlock:
        """Run a prepared call under its time limit; see the module docstring.

        Anything the tool raises (a ``BaseException`` included) becomes an error result,
        as does a call past its limit; only the caller's cancellation,
        ``KeyboardInterrupt`` and ``SystemExit`` propagate.
        """
        if ctx.thread_pool is None:
            ctx.thread_pool = self.thread_pool
        limit = self.timeout_for(tool)
        try:
            result = await _run_limited(tool.call(tool_input, ctx), limit)
        except _ToolTimeoutError:
            assert limit is not None
            logger.info("tool %s timed out after %s s", tool.name, limit)
            return _error(
                tool_use,
                f"{tool.name} timed out after {limit:g} seconds (its time limit) and was "
                "abandoned; it may have done part of its work. Try a smaller task, or "
                "different arguments.",
            )
        except BaseException as exc:
            if must_propagate(exc):
                raise  # the caller's cancellation is never swallowed
            return self._failed(tool, tool_use, exc)
        try:
            metadata: dict[str, Any] = {}
            if isinstance(result, ToolResult):
                output, is_error = result.output, result.is_error
                if result.metadata:
                    # stored with the message: it must survive every backend's JSON
                    metadata = json.loads(json.dumps(result.metadata))
            else:
                output, is_error = to_text(result), False
            return ToolResultBlock(
                id=tool_use.id,
                name=tool_use.name,
                output=output,
                state="error" if is_error else "success",
                metadata=metadata,
            )
        except Exception as exc:
            return _error(
                tool_use,
                f"{tool.name} returned a result that cannot be shown: {describe_exception(exc)}",
            )

    def _failed(
        self, tool: ToolBase, tool_use: ToolUseBlock, exc: BaseException
    ) -> ToolResultBlock:
        what = describe_exception(exc)
        logger.info("tool %s raised %s", tool.name, what)
        return _error(tool_use, f"{tool.name} failed: {what}")

    def close(self) -> None:
        """Let the idle threads of the toolkit's pool exit now (they also exit when idle)."""
        self.thread_pool.close()


CANCEL_GRACE_SECONDS = 1.0
"""How long a cancelled (timed-out) async tool may take to unwind before it is abandoned."""

_abandoned_tasks: set[asyncio.Task[Any]] = set()


class _ToolTimeoutError(Exception):
    """The call ran past its time limit (distinct from a TimeoutError the tool raises)."""


async def _guard(call: Any) -> tuple[bool, Any]:
    # KeyboardInterrupt/SystemExit raised inside a task would escape to the event loop;
    # carry them out as values and re-raise them in the awaiting task instead
    try:
        return True, (await call if inspect.isawaitable(call) else call)
    except (KeyboardInterrupt, SystemExit) as exc:
        return False, exc


async def _run_limited(call: Any, limit: float | None) -> Any:
    """Await ``call`` (a tool's coroutine) for at most ``limit`` seconds.

    The call runs in its own task, so a tool that swallows cancellation cannot hang the
    reply: after the limit it is cancelled, given :data:`CANCEL_GRACE_SECONDS` to unwind,
    and abandoned if still running.
    """
    task = asyncio.ensure_future(_guard(call))
    try:
        done, _ = await asyncio.wait({task}, timeout=limit)
    except asyncio.CancelledError:
        await _stop(task)
        raise
    if not done:
        await _stop(task)
        raise _ToolTimeoutError
    ok, value = task.result()  # the tool's exception, if any, is raised here
    if not ok:
        raise value
    return value


async def _stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    await asyncio.wait({task}, timeout=CANCEL_GRACE_SECONDS)
    if not task.done():
        _abandoned_tasks.add(task)  # keep it referenced while it runs
    task.add_done_callback(_forget)


def _forget(task: asyncio.Task[Any]) -> None:
    _abandoned_tasks.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" noise


def _error(tool_use: ToolUseBlock, message: str, state: str = "error") -> ToolResultBlock:
    return ToolResultBlock(id=tool_use.id, name=tool_use.name, output=message, state=state)  # type: ignore[arg-type]
