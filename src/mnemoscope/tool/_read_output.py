"""``read_tool_output``: read a stored tool output by message id, block index and range.

A tool result over the cap reaches the model as a head/tail preview; the whole text is
stored in the result message's ``metadata["full_outputs"]``. Old results shown as stubs
(``ContextPolicy.clear_tool_results_after``) are read back the same way::

    agent = Agent(..., toolkit=Toolkit([ReadToolOutput(), ...]))
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from mnemoscope.message import ToolResultBlock
from mnemoscope.tool._base import ToolBase, ToolContext, ToolResult

FULL_OUTPUTS_KEY = "full_outputs"


class ReadToolOutputInput(BaseModel):
    message_id: str = Field(description="id of the tool-result message")
    index: int = Field(0, ge=0, description="position of the result in that message")
    offset: int = Field(0, ge=0, description="first character to read")
    length: int = Field(4000, ge=1, le=50_000, description="how many characters to read")


class ReadToolOutput(ToolBase):
    """Reads a stored tool output of this session (read-only, allowed without asking)."""

    name = "read_tool_output"
    description = (
        "Read part of a stored tool output that was cut or cleared from the context: "
        "give the message_id and index shown in the notice, and a character range."
    )
    Input = ReadToolOutputInput
    is_read_only = True
    auto_allow = True

    async def call(self, tool_input: ReadToolOutputInput, ctx: ToolContext) -> ToolResult:
        if ctx.stored_messages is None:
            return ToolResult.error("read_tool_output works only inside an agent's reply")
        found = next(
            (m for m in await ctx.stored_messages("tool_result") if m.id == tool_input.message_id),
            None,
        )
        if found is None:
            return ToolResult.error(
                f"no stored tool-result message has id {tool_input.message_id!r}; use the "
                "message_id given in the notice"
            )
        results = [b for b in found.content if isinstance(b, ToolResultBlock)]
        if tool_input.index >= len(found.content) or not isinstance(
            found.content[tool_input.index], ToolResultBlock
        ):
            return ToolResult.error(
                f"message {found.id!r} has no tool result at index {tool_input.index} "
                f"(it holds {len(results)})"
            )
        block = found.content[tool_input.index]
        assert isinstance(block, ToolResultBlock)
        full = found.metadata.get(FULL_OUTPUTS_KEY, {}).get(str(tool_input.index))
        text = full if isinstance(full, str) else block.output_text()
        end = min(tool_input.offset + tool_input.length, len(text))
        part = text[tool_input.offset : end]
        more = f" — {len(text) - end:,} more; next offset={end}" if end < len(text) else " — end"
        return ToolResult(
            output=f"[{block.name} output, characters {tool_input.offset:,}-{end:,} of "
            f"{len(text):,}{more}]\n{part}"
        )
