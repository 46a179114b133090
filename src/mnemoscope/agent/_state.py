"""Per-agent state that outlives a reply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mnemoscope.permission import PermissionContext


@dataclass
class AgentState:
    """State of one agent.

    Attributes:
        permission_context: decides every tool call (mode, working directories, rules).
        tool_state: scratch space tools share across replies (e.g. which files were read).
    """

    permission_context: PermissionContext = field(default_factory=PermissionContext)
    tool_state: dict[str, Any] = field(default_factory=dict)
