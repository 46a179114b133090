"""The :class:`Toolkit`: the tools an agent may call, their schemas and safe execution."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import pydantic

from mnemoscope.errors import UserError
from mnemoscope.message import ToolResultBlock, ToolUseBlock
from mnemoscope.model import RAW_ARGUMENTS_KEY, ToolSchema
from mnemoscope.tool._base import ToolBase, ToolContext, ToolResult
from mnemoscope.tool._function import FunctionTool

logger = logging.getLogger("mnemoscope.tool")


class Toolkit:
    """A named set of tools.

    Args:
        tools: :class:`ToolBase` instances or plain functions (wrapped in
            :class:`FunctionTool`).

    Example::

        toolkit = Toolkit(tools=[Read(), Write(), Edit(), get_weather])
    """

    def __init__(self, tools: Iterable[ToolBase | Callable[..., Any]] | None = None) -> None:
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

    async def execute(
        self,
        tool: ToolBase,
        tool_input: pydantic.BaseModel,
        tool_use: ToolUseBlock,
        ctx: ToolContext,
    ) -> ToolResultBlock:
        """Run a prepared call. An exception becomes an error result; cancellation propagates."""
        try:
            result = await tool.call(tool_input, ctx)
        except Exception as exc:
            logger.info("tool %s raised %s: %s", tool.name, type(exc).__name__, exc)
            return _error(tool_use, f"{tool.name} failed: {type(exc).__name__}: {exc}")
        if not isinstance(result, ToolResult):
            result = ToolResult(output=str(result))
        return ToolResultBlock(
            id=tool_use.id,
            name=tool_use.name,
            output=result.output,
            state="error" if result.is_error else "success",
        )


def _error(tool_use: ToolUseBlock, message: str, state: str = "error") -> ToolResultBlock:
    return ToolResultBlock(id=tool_use.id, name=tool_use.name, output=message, state=state)  # type: ignore[arg-type]
