"""Function tools: a plain (async or sync) function becomes a tool.

The JSON schema comes from the type hints, the description and per-parameter docs from
the Google-style docstring::

    @function_tool
    async def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        \"\"\"Current weather of a city.

        Args:
            city: the city name, e.g. "Hangzhou".
            unit: temperature unit.
        \"\"\"
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from mnemoscope.errors import UserError, ValidationError
from mnemoscope.tool._base import ToolBase, ToolContext, ToolResult
from mnemoscope.tool._output import describe_exception

_ARG_LINE = re.compile(r"^\s{2,}(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {param: doc})."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    lines = doc.splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    section = None
    current = None
    for line in lines:
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            section, current = "args", None
            continue
        if stripped.endswith(":") and stripped[:-1] in ("Returns", "Raises", "Yields", "Example"):
            section, current = "other", None
            continue
        if section is None:
            desc.append(line)
        elif section == "args":
            m = _ARG_LINE.match("  " + line if not line.startswith(" ") else line)
            if m and (line.startswith("    ") or not line.startswith("        ")) and m.group(1):
                current = m.group(1).lstrip("*")
                params[current] = m.group(3).strip()
            elif current and stripped:
                params[current] += " " + stripped
    return "\n".join(desc).strip(), params


class FunctionTool(ToolBase):
    """A tool made from a function; see the module docstring.

    A parameter annotated with :class:`ToolContext` (any name) receives the call's
    context and is hidden from the model. A sync function runs in the toolkit's bounded
    thread pool; ``timeout`` (seconds) overrides the toolkit's default time limit.

    ``concurrency_safe``: whether calls may overlap with the other concurrency-safe calls
    of one model step. The default (``None``): an *async* read-only function (a search, an
    HTTP GET) runs concurrently; a function with side effects runs alone, in the order the
    model gave; a *sync* function runs alone too, as concurrent calls of it would run on
    several threads at once, which most blocking code (an SDK client, a ``sqlite3``
    connection) is not written for. Pass ``True`` for a thread-safe sync tool or for side
    effects that do not depend on each other, ``False`` for a tool that must not overlap
    (a rate-limited API).
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        is_read_only: bool = False,
        auto_allow: bool = False,
        timeout: float | None = None,
        concurrency_safe: bool | None = None,
    ) -> None:
        if not callable(func):
            raise UserError(f"FunctionTool needs a callable, got {func!r}")
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise UserError(
                f"tool {name or getattr(func, '__name__', func)!r}: timeout must be a positive "
                f"number of seconds or None (the toolkit's default), got {timeout!r}"
            )
        if concurrency_safe is not None and not isinstance(concurrency_safe, bool):
            raise UserError(
                f"tool {name or getattr(func, '__name__', func)!r}: concurrency_safe must be "
                f"True, False or None (the default), got {concurrency_safe!r}"
            )
        self.timeout = timeout
        self.concurrency_safe = concurrency_safe
        self.func = func
        self.name = name or func.__name__
        doc_desc, param_docs = parse_docstring(func.__doc__)
        self.description = description or doc_desc or self.name
        self.is_read_only = is_read_only
        self.auto_allow = auto_allow
        self._context_param: str | None = None
        hints = get_type_hints(func)
        fields: dict[str, Any] = {}
        for pname, param in inspect.signature(func).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise UserError(
                    f"tool {self.name!r}: *args/**kwargs cannot be described to a model"
                )
            annotation = hints.get(pname, Any)
            if annotation is ToolContext:
                self._context_param = pname
                continue
            default = ... if param.default is param.empty else param.default
            fields[pname] = (annotation, Field(default, description=param_docs.get(pname)))
        self.Input = create_model(  # type: ignore[misc]
            f"{self.name}_input", __config__=ConfigDict(extra="forbid"), **fields
        )

    @property
    def is_concurrency_safe(self) -> bool:
        """``concurrency_safe``, or when it is ``None``: read-only and async."""
        if self.concurrency_safe is None:
            return bool(self.is_read_only) and inspect.iscoroutinefunction(self.func)
        return bool(self.concurrency_safe)

    async def call(self, tool_input: BaseModel, ctx: ToolContext) -> ToolResult:
        kwargs = {k: getattr(tool_input, k) for k in type(tool_input).model_fields}
        if self._context_param:
            kwargs[self._context_param] = ctx
        if inspect.iscoroutinefunction(self.func):
            result = await self.func(**kwargs)
        else:
            # the toolkit's bounded pool, never the loop's default executor: a hung sync
            # tool must not starve asyncio.to_thread users (file tools, backends)
            result = await ctx.run_blocking(self.func, **kwargs)
            if inspect.isawaitable(result):  # e.g. an object whose __call__ is async
                result = await result
        if isinstance(result, ToolResult):
            return result
        return ToolResult(output=result if isinstance(result, str) else to_text(result))


def to_text(value: Any) -> str:
    """The text shown to the model for a tool's return value (JSON where possible).

    Raises:
        ValidationError: the value cannot be turned into text (its ``__str__`` raises).
    """
    if value is None:
        return ""
    try:
        if isinstance(value, BaseModel):
            return value.model_dump_json()
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):
            return str(value)
    except Exception as exc:
        raise ValidationError(
            f"returned a {type(value).__name__} that cannot be turned into text "
            f"({describe_exception(exc)}); return a str, a JSON-serialisable value "
            "or a ToolResult"
        ) from exc


def function_tool(func: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """Decorator: ``@function_tool`` or ``@function_tool(name=..., is_read_only=True)``.

    Keyword arguments are those of :class:`FunctionTool` (``name``, ``description``,
    ``is_read_only``, ``auto_allow``, ``timeout`` in seconds, ``concurrency_safe``).
    """
    if func is None:
        return lambda f: FunctionTool(f, **kwargs)
    return FunctionTool(func, **kwargs)
