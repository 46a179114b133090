"""mnemoscope: context and memory for LLM agents.

The names a user starts with are importable from here (``from mnemoscope import Agent``).
They load on first use, so ``import mnemoscope`` stays cheap and pulls in no optional
extra; each also lives in its own package (``mnemoscope.agent``, ``mnemoscope.memory``, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mnemoscope._lazy import lazy_exports
from mnemoscope._version import __version__

if TYPE_CHECKING:
    from mnemoscope.agent import (
        Agent,
    )
    from mnemoscope.context import (
        ContextPolicy,
    )
    from mnemoscope.memory import (
        AsyncSQLAlchemyMemory,
        InMemoryMemory,
        LocalLongTermMemory,
        MemoryBase,
        RedisMemory,
    )
    from mnemoscope.message import (
        AssistantMsg,
        HintBlock,
        ImageBlock,
        Msg,
        SystemMsg,
        TextBlock,
        ThinkingBlock,
        ToolResultBlock,
        ToolUseBlock,
        UserMsg,
    )
    from mnemoscope.middleware import (
        AgenticMemoryMiddleware,
        Mem0Middleware,
        MiddlewareBase,
    )
    from mnemoscope.model import (
        OpenAIChatModel,
    )
    from mnemoscope.permission import (
        AdditionalWorkingDirectory,
        PermissionMode,
    )
    from mnemoscope.tool import (
        Edit,
        Glob,
        Grep,
        Read,
        Toolkit,
        Write,
        function_tool,
    )

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Agent": "mnemoscope.agent",
        "ContextPolicy": "mnemoscope.context",
        "AsyncSQLAlchemyMemory": "mnemoscope.memory",
        "InMemoryMemory": "mnemoscope.memory",
        "LocalLongTermMemory": "mnemoscope.memory",
        "MemoryBase": "mnemoscope.memory",
        "RedisMemory": "mnemoscope.memory",
        "AssistantMsg": "mnemoscope.message",
        "HintBlock": "mnemoscope.message",
        "ImageBlock": "mnemoscope.message",
        "Msg": "mnemoscope.message",
        "SystemMsg": "mnemoscope.message",
        "TextBlock": "mnemoscope.message",
        "ThinkingBlock": "mnemoscope.message",
        "ToolResultBlock": "mnemoscope.message",
        "ToolUseBlock": "mnemoscope.message",
        "UserMsg": "mnemoscope.message",
        "AgenticMemoryMiddleware": "mnemoscope.middleware",
        "Mem0Middleware": "mnemoscope.middleware",
        "MiddlewareBase": "mnemoscope.middleware",
        "OpenAIChatModel": "mnemoscope.model",
        "AdditionalWorkingDirectory": "mnemoscope.permission",
        "PermissionMode": "mnemoscope.permission",
        "Edit": "mnemoscope.tool",
        "Glob": "mnemoscope.tool",
        "Grep": "mnemoscope.tool",
        "Read": "mnemoscope.tool",
        "Toolkit": "mnemoscope.tool",
        "Write": "mnemoscope.tool",
        "function_tool": "mnemoscope.tool",
    },
)


__all__ = [
    "AdditionalWorkingDirectory",
    "Agent",
    "AgenticMemoryMiddleware",
    "AssistantMsg",
    "AsyncSQLAlchemyMemory",
    "ContextPolicy",
    "Edit",
    "Glob",
    "Grep",
    "HintBlock",
    "ImageBlock",
    "InMemoryMemory",
    "LocalLongTermMemory",
    "Mem0Middleware",
    "MemoryBase",
    "MiddlewareBase",
    "Msg",
    "OpenAIChatModel",
    "PermissionMode",
    "Read",
    "RedisMemory",
    "SystemMsg",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Toolkit",
    "UserMsg",
    "Write",
    "__version__",
    "function_tool",
]
