"""Messages and content blocks."""

from mnemoscope.message._blocks import (
    Base64Source,
    ContentBlock,
    HintBlock,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolResultState,
    ToolUseBlock,
    URLSource,
)
from mnemoscope.message._escape import WRAPPER_TAGS, escape_attribute, escape_injected
from mnemoscope.message._msg import (
    MSG_SCHEMA_VERSION,
    AssistantMsg,
    Msg,
    Role,
    SystemMsg,
    UserMsg,
    as_msg,
    new_id,
)

__all__ = [
    "MSG_SCHEMA_VERSION",
    "WRAPPER_TAGS",
    "AssistantMsg",
    "Base64Source",
    "ContentBlock",
    "HintBlock",
    "ImageBlock",
    "Msg",
    "Role",
    "SystemMsg",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolResultState",
    "ToolUseBlock",
    "URLSource",
    "UserMsg",
    "as_msg",
    "escape_attribute",
    "escape_injected",
    "new_id",
]
