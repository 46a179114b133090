"""``recall``: search this session's own history, including what was cut or compacted.

Ranks every stored message of the session (BM25 over :meth:`MemoryBase.get`, so it works
on every backend and sees what other processes stored) and returns the best turns
verbatim, with their ids and dates::

    agent = Agent(..., toolkit=Toolkit([RecallTool(), ...]))
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from mnemoscope.tool._base import ToolBase, ToolContext, ToolResult


class RecallInput(BaseModel):
    query: str = Field(min_length=1, description="keywords to search the conversation for")
    limit: int = Field(5, ge=1, le=20, description="how many turns to return")
    only_cut: bool = Field(
        False, description="search only turns no longer in the context (compacted ones)"
    )


class RecallTool(ToolBase):
    """Searches the session's stored turns (read-only, allowed without asking)."""

    name = "recall"
    description = (
        "Search earlier turns of this conversation, including those left out of the "
        "context or summarised; returns matching turns verbatim with ids and dates."
    )
    Input = RecallInput
    is_read_only = True
    auto_allow = True

    def __init__(self, *, max_chars_per_turn: int = 2000) -> None:
        self.max_chars_per_turn = max_chars_per_turn

    async def call(self, tool_input: RecallInput, ctx: ToolContext) -> ToolResult:
        if ctx.recall is None:
            return ToolResult.error("recall works only inside an agent's reply")
        # the search is the agent's context engine's (the tool layer sits below it)
        text = await ctx.recall(
            tool_input.query,
            limit=tool_input.limit,
            only_cut=tool_input.only_cut,
            max_chars=self.max_chars_per_turn,
        )
        return ToolResult(output=text)
