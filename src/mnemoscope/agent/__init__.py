"""The agent: a ReAct loop with middleware."""

from mnemoscope.agent._agent import (
    FULL_OUTPUTS_KEY,
    HISTORY_EXCLUDED_MARKS,
    TOOL_RESULT_MARK,
    Agent,
)
from mnemoscope.agent._state import AgentState

__all__ = ["FULL_OUTPUTS_KEY", "HISTORY_EXCLUDED_MARKS", "TOOL_RESULT_MARK", "Agent", "AgentState"]
