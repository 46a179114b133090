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

import asyncio
import inspect
import re
from collections.abc import Callable
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from mnemoscope.errors import UserError
from mnemoscope.tool._base import ToolBase, ToolContext, ToolResult

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
    context and is hidden from the model.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        is_read_only: bool = False,
        auto_allow: bool = False,
    ) -> None:
        if not callable(func):
            raise UserError(f"FunctionTool needs a callable, got {func!r}")
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

    async def call(self, tool_input: BaseModel, ctx: ToolContext) -> ToolResult:
        kwargs = {k: getattr(tool_input, k) for k in type(tool_input).model_fields}
        if self._context_param:
            kwargs[self._context_param] = ctx
        if inspect.iscoroutinefunction(self.func):
            result = await self.func(**kwargs)
        else:
            result = await asyncio.to_thread(self.func, **kwargs)
        if isinstance(result, ToolResult):
            return result
        return ToolResult(output=result if isinstance(result, str) else _to_text(result))


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        import json

        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def function_tool(func: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """Decorator: ``@function_tool`` or ``@function_tool(name=..., is_read_only=True)``."""
    if func is None:
        return lambda f: FunctionTool(f, **kwargs)
    return FunctionTool(func, **kwargs)
