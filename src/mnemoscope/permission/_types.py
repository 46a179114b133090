"""Permission modes, working directories, rules and decisions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class PermissionMode(StrEnum):
    """How tool calls are decided.

    * ``DEFAULT``: reads inside the working directories are allowed; writes inside them
      ask; anything outside is denied.
    * ``ACCEPT_EDITS``: writes inside the working directories are allowed too.
    * ``PLAN`` (alias ``READ_ONLY``): every write is denied.
    * ``BYPASS``: everything is allowed but what deny rules and the secret locations
      refuse (use only in a sandbox).
    """

    DEFAULT = "default"
    ACCEPT_EDITS = "accept_edits"
    PLAN = "plan"
    BYPASS = "bypass"
    READ_ONLY = "plan"  # alias of PLAN


class AdditionalWorkingDirectory(BaseModel):
    """A directory the agent may work in besides its own.

    Attributes:
        path: the directory.
        source: who granted it (shown in decisions, e.g. ``"long-term-memory-demo"``).
    """

    path: str
    source: str = "user"


Behavior = Literal["allow", "deny", "ask"]


class PermissionRule(BaseModel):
    """Allow or deny a tool, optionally only for paths matching a glob pattern.

    ``tool="*"`` matches every tool; ``path="/srv/data/**"`` matches files under it
    (and the directory itself). A relative pattern (``secrets/**``) means below the
    agent's ``cwd`` and below each working directory; a deny pattern starting with ``*``
    (``**/.env``) also matches anywhere. Deny patterns match case-insensitively.
    """

    tool: str = "*"
    path: str | None = None
    behavior: Literal["allow", "deny", "ask"] = "allow"


class PermissionDecision(BaseModel):
    """The engine's answer for one tool call; ``message`` is readable by the model."""

    behavior: Behavior
    message: str = ""
    reason: str = ""
    """Machine-readable cause: ``mode``, ``rule``, ``outside_working_dirs``, ``tool``..."""


class PermissionRequest(BaseModel):
    """What an ask callback is shown."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tool_name: str
    tool_input: dict[str, Any] = Field(default_factory=dict)
    paths: list[str] = Field(default_factory=list)
    message: str = ""


AskCallback = Callable[[PermissionRequest], Awaitable[bool]]
"""Human approval: return True to allow the call."""
