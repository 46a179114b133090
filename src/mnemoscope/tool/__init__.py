"""Tools and the toolkit.

File tools (Read/Write/Edit/Glob/Grep) work over a workspace backend; ``file_tools(backend)``
builds all five (what ``workspace.list_tools()`` returns).
"""

from __future__ import annotations

from mnemoscope.tool._base import (
    PathAccess,
    ToolBase,
    ToolContext,
    ToolResult,
    permission_paths_of,
)
from mnemoscope.tool._compact_tool import COMPACT_TOOL, CompactOutcome, CompactTool

# importing the file tools also registers file_tools as WorkspaceBase.tools_factory
from mnemoscope.tool._file_tools import (
    Edit,
    Glob,
    Grep,
    Read,
    Write,
    file_tools,
    read_version,
    record_read,
)
from mnemoscope.tool._function import FunctionTool, function_tool, parse_docstring
from mnemoscope.tool._output import describe_exception, must_propagate
from mnemoscope.tool._read_output import ReadToolOutput
from mnemoscope.tool._recall_tool import RecallTool
from mnemoscope.tool._toolkit import Toolkit

__all__ = [
    "COMPACT_TOOL",
    "CompactOutcome",
    "CompactTool",
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
    "file_tools",
    "function_tool",
    "must_propagate",
    "parse_docstring",
    "permission_paths_of",
    "read_version",
    "record_read",
]
