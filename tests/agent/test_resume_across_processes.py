"""``Agent(memory=RedisMemory(...))`` resumes a conversation after a process restart.

Each turn runs in its own Python process; the only thing they share is the session in
Redis (or a SQLite file), found again by ``user_id`` and ``session_id``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TURN = textwrap.dedent(
    """
    import asyncio, json, sys

    from mnemoscope.agent import Agent
    from mnemoscope.testing import ScriptedChatModel

    memory_kind, target, session, user_text, answer = sys.argv[1:6]

    def make_memory():
        if memory_kind == "redis":
            from mnemoscope.memory import RedisMemory
            return RedisMemory.from_url(target, user_id="alice", session_id=session)
        from mnemoscope.memory import AsyncSQLAlchemyMemory
        return AsyncSQLAlchemyMemory(
            f"sqlite+aiosqlite:///{target}", user_id="alice", session_id=session
        )

    async def main():
        memory = make_memory()
        model = ScriptedChatModel([answer])
        agent = Agent(
            name="assistant",
            system_prompt="You are a helpful assistant.",
            model=model,
            memory=memory,
        )
        reply = await agent.reply(user_text)
        seen = [m.get_text_content() for m in model.calls[0].messages]
        await memory.aclose()
        print(json.dumps({"reply": reply.get_text_content(), "seen": seen}))

    asyncio.run(main())
    """
)


def _turn(kind: str, target: str, session: str, text: str, answer: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", TURN, kind, target, session, text, answer],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
def test_conversation_resumes_in_a_new_process(
    kind: str, unique_id: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = request.getfixturevalue("redis_url") if kind == "redis" else str(tmp_path / "s.db")
    session = f"resume-{unique_id}"
    first = _turn(kind, target, session, "I live in Hangzhou.", "Noted: Hangzhou.")
    assert first["reply"] == "Noted: Hangzhou."
    assert first["seen"] == ["You are a helpful assistant.", "I live in Hangzhou."]

    second = _turn(kind, target, session, "Where do I live?", "In Hangzhou.")
    assert second["reply"] == "In Hangzhou."
    # the new process's model saw the earlier turn, in order, before the new question
    assert second["seen"] == [
        "You are a helpful assistant.",
        "I live in Hangzhou.",
        "Noted: Hangzhou.",
        "Where do I live?",
    ]

    other = _turn(kind, target, f"{session}-other", "Who am I?", "I don't know yet.")
    assert other["seen"] == ["You are a helpful assistant.", "Who am I?"]
