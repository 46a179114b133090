"""The model calls of a reply that is still running: the call in progress, and a live page.

The reply is written to a real SQLite store step by step, as the agent stores it (the tool
use and its results in one batch, the answer at the end); the page is read between steps.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette", reason="the 'inspector' extra (starlette) is not installed")

from mnemoscope.inspector import create_inspector_app
from mnemoscope.memory import AsyncSQLAlchemyMemory
from mnemoscope.message import AssistantMsg, ToolResultBlock, ToolUseBlock, UserMsg

ALICE = {"Authorization": "Bearer tok-alice"}


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"


@pytest.fixture
async def memory(url: str) -> AsyncIterator[AsyncSQLAlchemyMemory]:
    async with AsyncSQLAlchemyMemory(url, user_id="alice", session_id="run") as mem:
        yield mem


@pytest.fixture
async def client(url: str, memory: AsyncSQLAlchemyMemory) -> AsyncIterator[httpx.AsyncClient]:
    await memory.add(UserMsg("alice", "warm-up"))  # the store's tables exist
    app = create_inspector_app(store=url, auth={"tok-alice": "alice"})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inspector") as c:
        yield c
    await app.state.inspector.aclose()


def _calls(html: str) -> list[str]:
    """Each call's heading and what it produced, in order."""
    return re.findall(r'<section class="call" data-call="(\d+)"><h2>(.*?)</h2><p>(.*?)</p>', html)


async def test_a_running_reply_shows_the_call_in_progress_and_is_live(
    client: httpx.AsyncClient, memory: AsyncSQLAlchemyMemory
) -> None:
    question = UserMsg("alice", "What is the weather?")
    await memory.add(question)
    page = (await client.get(f"/session/calls?sid=run&msg={question.id}", headers=ALICE)).text
    ((index, heading, produced),) = _calls(page)
    assert index == "1" and "in progress" in heading and "nothing stored yet" in produced
    assert '<div id="calls" data-live="1">' in page and "Live:" in page

    step = AssistantMsg("agent", [ToolUseBlock(id="c1", name="weather", input={})])
    result = UserMsg("tool", [ToolResultBlock(id="c1", name="weather", output="sunny")])
    await memory.add([step, result])
    page = (await client.get(f"/session/calls?sid=run&msg={question.id}", headers=ALICE)).text
    calls = _calls(page)
    assert [c[0] for c in calls] == ["1", "2"]
    assert step.id in calls[0][2] and "in progress" not in calls[0][1]
    assert "in progress" in calls[1][1] and 'data-live="1"' in page

    answer = AssistantMsg("agent", "It is sunny.")
    await memory.add(answer)
    page = (await client.get(f"/session/calls?sid=run&msg={question.id}", headers=ALICE)).text
    calls = _calls(page)
    assert [c[0] for c in calls] == ["1", "2"] and answer.id in calls[1][2]
    assert "in progress" not in page and "data-live" not in page and "Live:" not in page


async def test_a_reply_that_stopped_before_the_next_one_is_not_live(
    client: httpx.AsyncClient, memory: AsyncSQLAlchemyMemory
) -> None:
    stopped = UserMsg("alice", "a reply that was cancelled")
    step = AssistantMsg("agent", [ToolUseBlock(id="c1", name="weather", input={})])
    result = UserMsg("tool", [ToolResultBlock(id="c1", name="weather", output="sunny")])
    later = UserMsg("alice", "the next question")
    await memory.add([stopped, step, result, later, AssistantMsg("agent", "answer")])
    page = (await client.get(f"/session/calls?sid=run&msg={stopped.id}", headers=ALICE)).text
    assert [c[0] for c in _calls(page)] == ["1"]  # only the call that produced the step
    assert "in progress" not in page and "data-live" not in page
