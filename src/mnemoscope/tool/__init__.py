"""Tools and the toolkit. File tools (Read/Write/Edit/Glob/Grep) work over a workspace backend."""

from __future__ import annotations

from typing import Any

from mnemoscope.tool._base import (
    PathAccess,
    ToolBase,
    ToolContext,
    ToolResult,
    permission_paths_of,
)
from mnemoscope.tool._function import FunctionTool, function_tool, parse_docstring
from mnemoscope.tool._output import describe_exception, must_propagate
from mnemoscope.tool._read_output import ReadToolOutput
from mnemoscope.tool._recall_tool import RecallTool
from mnemoscope.tool._toolkit import Toolkit

_FILE_TOOLS = {"Read", "Write", "Edit", "Glob", "Grep", "read_version", "record_read"}


def __getattr__(name: str) -> Any:
    # file tools import the workspace layer; load them on first use
    if name in _FILE_TOOLS:
        from mnemoscope.tool import _file_tools

        return getattr(_file_tools, name)
    raise AttributeError(f"module 'mnemoscope.tool' has no attribute {name!r}")


__all__ = [
    "Edit",
    "FunctionTool",
    "Glob",
    "Grep",
    "PathAccess",
    "Read",
    "ReadToolOutput",
    "RecallTool",
    "ToolBase",
    "ToolContext",
    "ToolResult",
    "Toolkit",
    "Write",
    "describe_exception",
    "function_tool",
    "must_propagate",
    "parse_docstring",
    "permission_paths_of",
    "read_version",
    "record_read",
]
