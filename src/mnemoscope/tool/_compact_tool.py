"""``compact_context``: the model compacts the conversation when it finishes a task.

Automatic compaction waits for history to pass the policy's trigger; this tool lets the
model compact at a task boundary instead, while what it just did is still whole. It runs
the same compaction as the automatic one (the ``on_compress_context`` middleware chain,
the policy's summariser): the originals stay stored, marked ``compressed``, and the
summary lists their ids. Only complete history is compacted: never the calls of the
current step, this very call included. The agent needs a summariser::

    agent = Agent(
        ...,
        toolkit=Toolkit([CompactTool(), RecallTool()]),
        context_policy=ContextPolicy(window_tokens=32_000, summarizer=ExtractiveSummarizer()),
    )
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from mnemoscope.tool._base import ToolBase, ToolContext, ToolResult

COMPACT_TOOL = "compact_context"


@dataclass(frozen=True)
class CompactOutcome:
    """What a compaction asked for by the tool did (``ToolContext.compact`` returns it).

    Attributes:
        text: what the model is told: what was covered, or why nothing changed.
        failed: True when the compaction failed (nothing was changed).
    """

    text: str
    failed: bool = False


class CompactInput(BaseModel):
    """No arguments: everything complete so far is compacted."""


class CompactTool(ToolBase):
    """Compacts the conversation so far into one summary (allowed without asking: it
    deletes nothing, and what it covers stays searchable with ``recall``)."""

    name = COMPACT_TOOL
    description = (
        "Call this when you have finished a task and the conversation so far is no longer "
        "needed word for word: it is replaced in your context by a summary (task, state, "
        "decisions and facts with their message ids, next steps). Nothing is deleted: the "
        "original turns stay searchable with the recall tool. Do not call it in the middle "
        "of a task."
    )
    Input = CompactInput
    auto_allow = True

    async def call(self, tool_input: CompactInput, ctx: ToolContext) -> ToolResult:
        if ctx.compact is None:
            return ToolResult.error(f"{COMPACT_TOOL} works only inside an agent's reply")
        # the compaction is the agent's context engine's (the tool layer sits below it)
        outcome = await ctx.compact()
        if outcome.failed:
            return ToolResult.error(outcome.text)
        return ToolResult(output=outcome.text)
