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
    "new_id",
]
