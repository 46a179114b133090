"""Offline testing helpers shipped with mnemoscope."""

from mnemoscope.testing._scripted import ScriptedCall, ScriptedChatModel, tool_call

__all__ = ["ScriptedCall", "ScriptedChatModel", "tool_call"]
