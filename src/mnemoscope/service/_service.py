"""The service's core, independent of HTTP: sessions, replies, the busy policy, readers."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mnemoscope.agent import Agent
from mnemoscope.errors import UserError
from mnemoscope.message import new_id
from mnemoscope.service._events import TERMINAL_TYPES, ReplyFailedEvent
from mnemoscope.service._runner import ReplyRunner
from mnemoscope.service._settings import BusyPolicy, ServiceSettings
from mnemoscope.service._store import (
    Acquired,
    Busy,
    ReplyInfo,
    ReplyKey,
    ServiceStoreBase,
    SessionInfo,
    StoredEvent,
)

AgentFactory = Callable[[str, str], "Agent | Awaitable[Agent]"]

USER_ID_PARAMETERS = frozenset({"userid", "user", "uid", "username", "ownerid", "tenantid"})
"""Tool parameters (lower-cased, without ``_``/``-``) that would let the model choose whose
data a tool reaches; an agent whose tools take one is refused."""

WORKER_LOST = ReplyFailedEvent(
    reason="worker_lost",
    message="the process running this reply stopped (or lost the session lock) before the "
    "reply finished; the session history keeps the steps that were completed",
).model_dump_json()


class SessionNotFoundError(Exception):
    pass


class SessionBusyError(Exception):
    def __init__(self, running_reply: str | None, message: str) -> None:
        super().__init__(message)
        self.running_reply = running_reply


class ShuttingDownError(Exception):
    pass


def load_factory(spec: str | AgentFactory) -> AgentFactory:
    """``"module:function"`` (or the callable itself) -> the agent factory."""
    if callable(spec):
        return spec
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise UserError(
            "agent factory must be 'module:function' (e.g. 'myapp.agents:make_agent'), "
            f"got {spec!r}"
        )
    module_name, attr = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"agent factory {spec!r}: cannot import {module_name!r}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UserError(f"agent factory {spec!r}: {module_name} has no function {attr!r}")
    return fn


def check_agent(agent: object, user_id: str, session_id: str) -> Agent:
    """Refuse an agent that could reach another user's data (see USER_ID_PARAMETERS)."""
    if not isinstance(agent, Agent):
        raise UserError(f"the agent factory must return an Agent, got {type(agent).__name__}")
    mem = agent.memory
    if (mem.user_id, mem.session_id) != (user_id, session_id):
        raise UserError(
            f"the agent factory built a memory for user {mem.user_id!r}, session "
            f"{mem.session_id!r} when asked for {user_id!r}, {session_id!r}: build it with "
            "user_id=user_id, session_id=session_id"
        )
    for mw in agent.middlewares:
        owner = getattr(mw, "user_id", None)
        if owner is not None and owner != user_id:
            raise UserError(
                f"middleware {type(mw).__name__} is scoped to user {owner!r}, not {user_id!r}: "
                "pass the factory's user_id to it"
            )
    for schema in agent.toolkit.schemas():
        props = schema.get("input_schema", {}).get("properties", {})
        for name in props:
            if re.sub(r"[_\-]", "", name.lower()) in USER_ID_PARAMETERS:
                raise UserError(
                    f"tool {schema['name']!r} takes {name!r} from the model, which would let a "
                    "prompt choose whose data it reaches; bind the user id in the agent "
                    "factory (a closure or functools.partial) instead"
                )
    return agent


@dataclass
class _Line:
    """The messages of this process waiting for one busy session."""

    turn: asyncio.Lock = field(default_factory=asyncio.Lock)  # wakes its waiters in order
    waiting: int = 0


class AgentService:
    """Sessions and replies over a store (what the HTTP routes call)."""

    def __init__(
        self, agent_factory: AgentFactory, store: ServiceStoreBase, settings: ServiceSettings
    ) -> None:
        self.agent_factory = agent_factory
        self.store = store
        self.settings = settings
        self.runners: dict[tuple[str, str, str], ReplyRunner] = {}
        self._lines: dict[tuple[str, str], _Line] = {}
        self.stopping = False

    # ------------------------------------------------------------------ agents
    async def build_agent(self, user_id: str, session_id: str) -> Agent:
        agent = self.agent_factory(user_id, session_id)
        if inspect.isawaitable(agent):
            agent = await agent
        return check_agent(agent, user_id, session_id)

    async def history(self, user_id: str, session_id: str) -> list[Any]:
        if await self.store.get_session(user_id, session_id) is None:
            raise SessionNotFoundError
        agent = await self.build_agent(user_id, session_id)
        try:
            return (await agent.memory.export_state()).messages
        finally:
            await agent.memory.aclose()

    # ---------------------------------------------------------------- sessions
    async def create_session(self, user_id: str, session_id: str | None, title: str) -> SessionInfo:
        sid = session_id or new_id()
        info = await self.store.create_session(user_id, sid, title)
        if info is None:
            raise SessionBusyError(None, f"session {sid!r} already exists")
        return info

    async def delete_session(self, user_id: str, session_id: str) -> None:
        acquired = await self._acquire(user_id, session_id, "reject")
        try:
            agent = await self.build_agent(user_id, session_id)
            try:
                await agent.memory.clear()
            finally:
                await agent.memory.aclose()
            await self.store.delete_session(user_id, session_id, acquired.token)
        finally:
            await self.store.release(user_id, session_id, acquired.token)

    # ------------------------------------------------------------------ replies
    async def _acquire(
        self, user_id: str, session_id: str, policy: BusyPolicy, reply_id: str | None = None
    ) -> Acquired:
        """The session's lock (with ``reply_id`` started), or the busy policy's error.

        Messages that wait for a busy session (``enqueue``, ``interrupt``) wait in one line
        per session in this process, first come, first served: only the first of the line
        polls the store, and a newcomer never goes before those waiting."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.queue_timeout
        key = (user_id, session_id)
        if policy == "reject" or key not in self._lines:
            result = await self._try_acquire(user_id, session_id, reply_id)
            if isinstance(result, Acquired):
                return result
            if policy == "reject":
                raise SessionBusyError(
                    result.running_reply,
                    "the session is answering another message; wait for its reply_end, "
                    "cancel it, or retry",
                )
        line = self._lines.setdefault(key, _Line())
        line.waiting += 1
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    await line.turn.acquire()
            except TimeoutError:
                raise self._still_busy(None) from None
            try:
                return await self._poll(user_id, session_id, policy, reply_id, deadline)
            finally:
                line.turn.release()
        finally:
            line.waiting -= 1
            if not line.waiting:
                del self._lines[key]

    async def _try_acquire(
        self, user_id: str, session_id: str, reply_id: str | None
    ) -> Acquired | Busy:
        result = await self.store.acquire(
            user_id, session_id, self.settings.lock_ttl, WORKER_LOST, reply_id
        )
        if isinstance(result, Acquired | Busy):
            return result
        raise SessionNotFoundError

    def _still_busy(self, running_reply: str | None) -> SessionBusyError:
        return SessionBusyError(
            running_reply,
            f"the session stayed busy for {self.settings.queue_timeout:g} s; retry later",
        )

    async def _poll(
        self,
        user_id: str,
        session_id: str,
        policy: BusyPolicy,
        reply_id: str | None,
        deadline: float,
    ) -> Acquired:
        """Try the store until the session is free (with backoff), or until ``deadline``."""
        loop = asyncio.get_running_loop()
        delay, interrupted = 0.005, False
        while True:
            result = await self._try_acquire(user_id, session_id, reply_id)
            if isinstance(result, Acquired):
                return result
            if policy == "interrupt" and result.running_reply and not interrupted:
                interrupted = True
                await self.cancel(user_id, session_id, result.running_reply)
            if self.stopping:
                raise ShuttingDownError
            if loop.time() >= deadline:
                raise self._still_busy(result.running_reply)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)

    async def start_reply(
        self, user_id: str, session_id: str, text: str, policy: BusyPolicy | None = None
    ) -> ReplyRunner:
        if self.stopping:
            raise ShuttingDownError
        reply_id = new_id()
        # the session's existence, its lock and the new reply: one atomic step
        policy = policy or self.settings.busy_policy
        acquired = await self._acquire(user_id, session_id, policy, reply_id)
        ref = ReplyKey(user_id, session_id, reply_id)
        runner = ReplyRunner(self.store, ref, acquired.token, self.settings)
        key = (user_id, session_id, reply_id)

        async def stream() -> AsyncIterator[Any]:
            agent = await self.build_agent(user_id, session_id)
            return _closing(agent, agent.reply_stream(text))

        self.runners[key] = runner
        runner.start(stream)
        assert runner.task is not None
        runner.task.add_done_callback(lambda _t: self.runners.pop(key, None))
        return runner

    async def cancel(self, user_id: str, session_id: str, reply_id: str) -> ReplyInfo | None:
        info = await self.store.request_cancel(user_id, session_id, reply_id)
        local = self.runners.get((user_id, session_id, reply_id))
        if local is not None:
            local.cancel("requested")
        return info

    async def events(
        self, user_id: str, session_id: str, reply_id: str, after: int
    ) -> AsyncGenerator[list[StoredEvent], None]:
        """The reply's events with ``seq > after``, each once, in order, to its terminal
        event, in batches of what was available; an empty batch now and then while
        waiting (for a keep-alive)."""
        last = after
        local = self.runners.get((user_id, session_id, reply_id))
        if local is not None:
            async for batch in local.follow(after):
                last = batch[-1].seq
                yield batch
            if local.finished:
                return
        while True:
            found = await self.store.read_events(
                user_id, session_id, reply_id, last, wait=self.settings.poll_interval * 2
            )
            batch = []
            for event in found:
                if event.seq <= last:
                    continue
                last = event.seq
                batch.append(event)
                if event.type in TERMINAL_TYPES:
                    yield batch
                    return
            if batch:
                yield batch
                continue
            yield []
            info = await self.store.get_reply(user_id, session_id, reply_id)
            if info is None or (info.status != "running" and last >= info.last_seq):
                return  # deleted, or ended and every event was delivered
            if info.status == "running" and (user_id, session_id, reply_id) not in self.runners:
                await self._recover(user_id, session_id)

    async def _recover(self, user_id: str, session_id: str) -> None:
        """Close a reply whose holder is gone (the lock is free but it still runs)."""
        if await self.store.lock_token(user_id, session_id) is not None:
            return
        result = await self.store.acquire(user_id, session_id, self.settings.lock_ttl, WORKER_LOST)
        if isinstance(result, Acquired):
            await self.store.release(user_id, session_id, result.token)

    # ---------------------------------------------------------------- lifecycle
    async def shutdown(self) -> None:
        """Refuse new replies, let running ones finish within the deadline, cancel the rest."""
        self.stopping = True
        running = [r for r in self.runners.values() if r.task is not None]
        tasks = [asyncio.ensure_future(r.wait()) for r in running]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=self.settings.shutdown_deadline)
            if pending:
                for r in running:
                    r.cancel("shutdown")
                await asyncio.wait(tasks, timeout=self.settings.lock_ttl)


async def _closing(agent: Agent, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
    try:
        async for event in events:
            yield event
    finally:
        await agent.memory.aclose()
