"""``ToolResult.metadata`` reaches the stored tool result, survives a reload from SQLite,
and is never sent to the model."""

from __future__ import annotations

from pathlib import Path

from mnemoscope.agent import Agent
from mnemoscope.memory import AsyncSQLAlchemyMemory
from mnemoscope.message import ToolResultBlock, ToolUseBlock
from mnemoscope.model import format_openai_messages
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import FunctionTool, ToolContext, Toolkit, ToolResult


async def count_words(text: str) -> ToolResult:
    """Count the words of a text.

    Args:
        text: the text.
    """
    return ToolResult(output=f"{len(text.split())} words", metadata={"words": 3, "tag": "zq-7"})


async def test_metadata_is_stored_reloaded_and_kept_from_the_model(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    model = ScriptedChatModel([tool_call("count_words", text="one two three"), "Three."])
    async with AsyncSQLAlchemyMemory(url, user_id="u", session_id="s") as memory:
        agent = Agent(
            name="a",
            system_prompt="Count.",
            model=model,
            memory=memory,
            toolkit=Toolkit(tools=[count_words]),
        )
        await agent.reply("How many words?")
    async with AsyncSQLAlchemyMemory(url, user_id="u", session_id="s") as reopened:
        stored = [
            b for m in await reopened.get() for b in m.content if isinstance(b, ToolResultBlock)
        ]
    assert [b.metadata for b in stored] == [{"words": 3, "tag": "zq-7"}]
    # the second model call holds the result: its output, not its metadata
    sent = str(format_openai_messages(model.calls[1].messages))
    assert "3 words" in sent and "zq-7" not in sent


async def test_metadata_that_json_cannot_store_is_an_error_result() -> None:
    async def odd() -> ToolResult:
        """Return metadata JSON cannot hold."""
        return ToolResult(output="ok", metadata={"when": object()})

    kit = Toolkit(tools=[FunctionTool(odd)])
    use = ToolUseBlock(id="1", name="odd", input={})
    prepared = kit.prepare(use)
    assert not isinstance(prepared, ToolUseBlock)
    result = await kit.execute(*prepared, use, ToolContext())
    assert result.state == "error" and "JSON serializable" in result.output_text()
