"""What middleware may use of the agent it is attached to.

Middleware sits below ``agent``: it never imports :class:`~mnemoscope.agent.Agent`. Hooks
and :meth:`~mnemoscope.middleware.MiddlewareBase.setup` receive the agent typed as
:class:`AgentView`, the narrow protocol below; the object passed is the real agent.
"""

from __future__ import annotations

from typing import Any, Protocol

from mnemoscope.memory import MemoryBase
from mnemoscope.model import ChatModelBase
from mnemoscope.permission import PermissionContext
from mnemoscope.tool import Toolkit


class AgentStateView(Protocol):
    """The agent's state that outlives a reply."""

    @property
    def permission_context(self) -> PermissionContext:
        """Decides every tool call (mode, working directories, rules)."""
        ...

    @property
    def tool_state(self) -> dict[str, Any]:
        """Scratch space tools share across replies (e.g. which files were read)."""
        ...


class AgentView(Protocol):
    """The parts of an agent that middleware reads."""

    @property
    def name(self) -> str:
        """The agent's name (stored as the name of its messages)."""
        ...

    @property
    def model(self) -> ChatModelBase:
        """The agent's chat model."""
        ...

    @property
    def toolkit(self) -> Toolkit:
        """The tools the agent may call."""
        ...

    @property
    def memory(self) -> MemoryBase:
        """The agent's short-term memory (the session)."""
        ...

    @property
    def state(self) -> AgentStateView:
        """Permission context and tool state."""
        ...
