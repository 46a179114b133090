"""Agent factories for the service tests; uvicorn workers import this module too.

The model is a :class:`ScriptedChatModel` whose answer depends on the user's message:

* ``slow:<seconds> ...``: waits, then answers ``done <message>``;
* ``tool:<seconds>``: calls the ``wait`` tool (which sleeps), then answers ``waited``;
* anything else: answers ``echo: <message>``, streamed word by word.

The short-term memory comes from ``MNEMOSCOPE_TEST_MEMORY_URL``: unset or ``memory://`` is
one :class:`InMemoryMemory` per (user, session) in this process; a ``redis://`` or
``postgresql+asyncpg://`` URL shares one client/engine per event loop.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from mnemoscope.agent import Agent
from mnemoscope.memory import InMemoryMemory, MemoryBase
from mnemoscope.middleware import MiddlewareBase
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import Toolkit, function_tool

MEMORIES: dict[tuple[str, str], InMemoryMemory] = {}
_SHARED: dict[tuple[int, str], Any] = {}
LATENCY = float(os.environ.get("MNEMOSCOPE_TEST_LATENCY", "0"))


def _user_text(call: Any) -> str:
    for m in reversed(call.messages):
        if m.role == "user" and m.get_text_content():
            return str(m.get_text_content())
    return ""


async def respond(call: Any) -> Any:
    text = _user_text(call)
    if LATENCY:
        await asyncio.sleep(LATENCY)
    if text.startswith("slow:"):
        await asyncio.sleep(float(text.split()[0][5:]))
        return f"done {text}"
    if text.startswith("tool:"):
        if call.messages[-1].name == "tool":
            return "waited"
        return tool_call("wait", seconds=float(text[5:].split()[0]))
    return f"echo: {text}"


@function_tool(auto_allow=True)
async def wait(seconds: float) -> str:
    """Sleep for a while.

    Args:
        seconds: how long.
    """
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


def memory_for(user_id: str, session_id: str) -> MemoryBase:
    url = os.environ.get("MNEMOSCOPE_TEST_MEMORY_URL", "memory://")
    if url.startswith("memory://"):
        return MEMORIES.setdefault(
            (user_id, session_id), InMemoryMemory(user_id=user_id, session_id=session_id)
        )
    key = (id(asyncio.get_running_loop()), url)
    if url.startswith("redis://"):
        import redis.asyncio as redis_asyncio

        from mnemoscope.memory import RedisMemory

        client = _SHARED.get(key) or _SHARED.setdefault(key, redis_asyncio.Redis.from_url(url))
        prefix = os.environ.get("MNEMOSCOPE_TEST_PREFIX", "svctest")
        return RedisMemory(client, user_id=user_id, session_id=session_id, key_prefix=prefix)
    from mnemoscope.memory import AsyncSQLAlchemyMemory

    engine = _SHARED.get(key) or _SHARED.setdefault(key, AsyncSQLAlchemyMemory.create_engine(url))
    return AsyncSQLAlchemyMemory(
        engine, user_id=user_id, session_id=session_id, table_prefix="svctest"
    )


async def make_agent(user_id: str, session_id: str) -> Agent:
    """The factory the tests serve (async, as a factory may be)."""
    return Agent(
        name="assistant",
        system_prompt="You are a test agent.",
        model=ScriptedChatModel(default=respond, stream=True),
        toolkit=Toolkit([wait]),
        memory=memory_for(user_id, session_id),
    )


def make_leaky_agent(user_id: str, session_id: str) -> Agent:
    """A wrong factory: every user gets the same memory."""
    return Agent(
        name="a",
        system_prompt="",
        model=ScriptedChatModel(default="hi"),
        memory=InMemoryMemory(user_id="everyone", session_id=session_id),
    )


@function_tool(auto_allow=True)
async def read_notes(user_id: str) -> str:
    """Read a user's notes.

    Args:
        user_id: whose.
    """
    return ""


def make_user_id_tool_agent(user_id: str, session_id: str) -> Agent:
    """A wrong factory: a tool lets the model pick the user."""
    return Agent(
        name="a",
        system_prompt="",
        model=ScriptedChatModel(default="hi"),
        toolkit=Toolkit([read_notes]),
        memory=memory_for(user_id, session_id),
    )


class ScopedMiddleware(MiddlewareBase):
    """A middleware scoped to one user (as ``Mem0Middleware(user_id=...)`` is)."""

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id


def make_wrong_middleware_agent(user_id: str, session_id: str) -> Agent:
    """A wrong factory: a long-term memory middleware of a fixed user."""
    return Agent(
        name="a",
        system_prompt="",
        model=ScriptedChatModel(default="hi"),
        middlewares=[ScopedMiddleware("everyone")],
        memory=memory_for(user_id, session_id),
    )
