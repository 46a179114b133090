"""Shared state of the service: sessions, reply event logs and the per-session lock.

A store is chosen by URL (:func:`store_from_url`):

=================================  ==========================================  =============
URL                                store                                       scope
=================================  ==========================================  =============
``memory://``                      :class:`InMemoryServiceStore`               one process
``redis://``, ``rediss://``        :class:`~mnemoscope.service.RedisServiceStore`   any processes
``postgresql://`` (asyncpg)        :class:`~mnemoscope.service.PostgresServiceStore` any processes
=================================  ==========================================  =============

Every record is keyed by ``(user_id, session_id)``: the store has no call that reads a
session without the user id, so the routing layer cannot reach another user's data by a
session id alone.

The lock: :meth:`ServiceStoreBase.acquire` gives the caller the session with a *fencing
token*, an integer that grows with every acquisition of that session. The lock expires
``ttl`` seconds after its last :meth:`~ServiceStoreBase.heartbeat` (so a killed process
frees it), and every write of a reply (:meth:`~ServiceStoreBase.append`) carries the
token: a holder whose lock expired and was taken by another process has its writes
refused (``AppendResult.fenced``) instead of mixing them into the new holder's.

When a process acquires a session whose last reply is still marked running (its process
died, or lost the lock), the store closes that reply in the same atomic step: it appends
the given ``reply_failed`` event and marks the reply failed. So every reply's log ends with
exactly one terminal event.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from mnemoscope.errors import ServiceStoreError, UserError

ReplyStatus = Literal["running", "done", "failed", "cancelled"]


@dataclass(frozen=True)
class SessionInfo:
    user_id: str
    session_id: str
    created_at: float
    title: str = ""


@dataclass(frozen=True)
class ReplyInfo:
    reply_id: str
    status: ReplyStatus
    created_at: float
    last_seq: int
    cancel_requested: bool = False


@dataclass(frozen=True)
class Acquired:
    """The lock was taken; ``token`` fences every write made under it."""

    token: int
    recovered_reply: str | None = None
    """A reply left running by a lost holder, closed as failed while acquiring."""


@dataclass(frozen=True)
class Busy:
    """Another holder has the session; ``running_reply`` is its reply, if one runs."""

    running_reply: str | None


@dataclass(frozen=True)
class NoSession:
    """The session does not exist (for this user)."""


AcquireResult = Acquired | Busy | NoSession


@dataclass(frozen=True)
class AppendResult:
    fenced: bool = False
    """The lock now belongs to another holder: nothing was written."""
    cancel_requested: bool = False


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    type: str
    data: str


_T = TypeVar("_T")


async def retry_once_if_dropped(
    op: Callable[[], Awaitable[_T]],
    *,
    server: str,
    what: str,
    retry: bool,
    dropped: tuple[type[BaseException], ...],
    failed: tuple[type[BaseException], ...],
) -> _T:
    """Run ``op()`` against a store's server, as every call of a networked store does.

    A lost connection (one of ``dropped``) runs ``op`` once more when ``retry`` says the
    call is harmless to repeat. What still fails, and any other error of the driver (one
    of ``failed``), becomes a :class:`ServiceStoreError`: "``server`` failed to ``what``".
    """
    for attempt in (1, 2):
        try:
            return await op()
        except dropped as exc:
            if attempt == 2 or not retry:
                raise ServiceStoreError(f"{server} failed to {what}: {exc}") from exc
        except failed as exc:
            raise ServiceStoreError(f"{server} failed to {what}: {exc}") from exc
    raise AssertionError("unreachable")


class ServiceStoreBase(ABC):
    """Where sessions, reply event logs and session locks live (see the module docstring)."""

    url: str = ""

    async def open(self) -> None:
        """Connect and create what is missing (tables); called once at app start."""

    async def aclose(self) -> None:
        """Release connections this store created."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise when the store cannot be reached (readiness)."""

    # ---------------------------------------------------------------- sessions
    @abstractmethod
    async def create_session(self, user_id: str, session_id: str, title: str) -> SessionInfo | None:
        """Create a session; ``None`` when this user already has one with that id."""

    @abstractmethod
    async def list_sessions(self, user_id: str) -> list[SessionInfo]:
        """The user's sessions, oldest first."""

    @abstractmethod
    async def get_session(self, user_id: str, session_id: str) -> SessionInfo | None: ...

    @abstractmethod
    async def delete_session(self, user_id: str, session_id: str, token: int) -> bool:
        """Delete a session with its replies and logs, under the lock ``token``."""

    # -------------------------------------------------------------------- lock
    @abstractmethod
    async def acquire(
        self,
        user_id: str,
        session_id: str,
        ttl: float,
        failed_event: str,
        reply_id: str | None = None,
    ) -> AcquireResult:
        """Take the session's lock (see module docstring); never waits. With ``reply_id``
        the reply is also started (as :meth:`start_reply`) in the same atomic step."""

    @abstractmethod
    async def heartbeat(
        self, user_id: str, session_id: str, token: int, ttl: float, reply_id: str | None
    ) -> AppendResult:
        """Extend the lock by ``ttl``; says whether it was lost and whether ``reply_id``
        was asked to stop."""

    @abstractmethod
    async def release(self, user_id: str, session_id: str, token: int) -> None:
        """Free the lock when ``token`` still holds it."""

    # ----------------------------------------------------------------- replies
    @abstractmethod
    async def start_reply(self, user_id: str, session_id: str, reply_id: str, token: int) -> bool:
        """Record a running reply; ``False`` when fenced."""

    @abstractmethod
    async def append(
        self,
        user_id: str,
        session_id: str,
        reply_id: str,
        token: int,
        events: list[StoredEvent],
        final_status: ReplyStatus | None = None,
    ) -> AppendResult:
        """Append events (consecutive ``seq``, the first = last + 1), atomically, and with
        ``final_status`` close the reply and free the session in the same step (so a
        client that saw the reply's end can send the next message at once).

        Repeating an append that was already stored is harmless (a retry after a dropped
        connection): the events are kept once.
        """

    @abstractmethod
    async def request_cancel(
        self, user_id: str, session_id: str, reply_id: str
    ) -> ReplyInfo | None:
        """Ask the holder to stop a running reply; ``None`` when there is no such reply."""

    @abstractmethod
    async def get_reply(self, user_id: str, session_id: str, reply_id: str) -> ReplyInfo | None: ...

    @abstractmethod
    async def list_replies(self, user_id: str, session_id: str) -> list[ReplyInfo]:
        """The session's replies, oldest first."""

    @abstractmethod
    async def read_events(
        self, user_id: str, session_id: str, reply_id: str, after: int, wait: float
    ) -> list[StoredEvent]:
        """Events with ``seq > after``; waits up to ``wait`` seconds when there are none."""

    @abstractmethod
    async def lock_token(self, user_id: str, session_id: str) -> int | None:
        """The token holding the session's lock now, or ``None`` when it is free."""


# ------------------------------------------------------------------ in-process
@dataclass
class _Reply:
    info: ReplyInfo
    token: int
    events: list[StoredEvent] = field(default_factory=list)


@dataclass
class _Session:
    info: SessionInfo
    fence: int = 0
    lock_token: int | None = None
    lock_expires: float = 0.0
    running: str | None = None
    replies: dict[str, _Reply] = field(default_factory=dict)


class InMemoryServiceStore(ServiceStoreBase):
    """Everything in this process (``memory://``): one worker, tests, demos."""

    url = "memory://"

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._changed = asyncio.Event()

    async def ping(self) -> None:
        return None

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _locked_by(self, s: _Session, token: int) -> bool:
        return s.lock_token == token

    async def create_session(self, user_id: str, session_id: str, title: str) -> SessionInfo | None:
        key = (user_id, session_id)
        if key in self._sessions:
            return None
        info = SessionInfo(user_id, session_id, time.time(), title)
        self._sessions[key] = _Session(info)
        return info

    async def list_sessions(self, user_id: str) -> list[SessionInfo]:
        found = [s.info for (u, _), s in self._sessions.items() if u == user_id]
        return sorted(found, key=lambda i: i.created_at)

    async def get_session(self, user_id: str, session_id: str) -> SessionInfo | None:
        s = self._sessions.get((user_id, session_id))
        return s.info if s else None

    async def delete_session(self, user_id: str, session_id: str, token: int) -> bool:
        s = self._sessions.get((user_id, session_id))
        if s is None or not self._locked_by(s, token):
            return False
        del self._sessions[(user_id, session_id)]
        self._notify()
        return True

    async def acquire(
        self,
        user_id: str,
        session_id: str,
        ttl: float,
        failed_event: str,
        reply_id: str | None = None,
    ) -> AcquireResult:
        s = self._sessions.get((user_id, session_id))
        if s is None:
            return NoSession()
        now = time.monotonic()
        if s.lock_token is not None and s.lock_expires > now:
            return Busy(s.running)
        s.fence += 1
        s.lock_token, s.lock_expires = s.fence, now + ttl
        recovered = s.running
        if recovered is not None:
            r = s.replies[recovered]
            seq = r.info.last_seq + 1
            r.events.append(StoredEvent(seq, "reply_failed", failed_event))
            r.info = _replace(r.info, status="failed", last_seq=seq)
            s.running = None
            self._notify()
        if reply_id is not None:
            await self.start_reply(user_id, session_id, reply_id, s.fence)
        return Acquired(s.fence, recovered)

    async def heartbeat(
        self, user_id: str, session_id: str, token: int, ttl: float, reply_id: str | None
    ) -> AppendResult:
        s = self._sessions.get((user_id, session_id))
        if s is None or not self._locked_by(s, token):
            return AppendResult(fenced=True)
        s.lock_expires = time.monotonic() + ttl
        r = s.replies.get(reply_id) if reply_id else None
        return AppendResult(cancel_requested=bool(r and r.info.cancel_requested))

    async def release(self, user_id: str, session_id: str, token: int) -> None:
        s = self._sessions.get((user_id, session_id))
        if s is not None and self._locked_by(s, token):
            s.lock_token = None
            self._notify()

    async def start_reply(self, user_id: str, session_id: str, reply_id: str, token: int) -> bool:
        s = self._sessions.get((user_id, session_id))
        if s is None or not self._locked_by(s, token):
            return False
        s.replies[reply_id] = _Reply(ReplyInfo(reply_id, "running", time.time(), 0), token)
        s.running = reply_id
        return True

    async def append(
        self,
        user_id: str,
        session_id: str,
        reply_id: str,
        token: int,
        events: list[StoredEvent],
        final_status: ReplyStatus | None = None,
    ) -> AppendResult:
        s = self._sessions.get((user_id, session_id))
        r = s.replies.get(reply_id) if s else None
        if s is None or r is None or not self._locked_by(s, token) or r.token != token:
            return AppendResult(fenced=True)
        if events[-1].seq <= r.info.last_seq:  # a repeated append
            return AppendResult(cancel_requested=r.info.cancel_requested)
        if r.info.status != "running" or events[0].seq != r.info.last_seq + 1:
            return AppendResult(fenced=True)
        r.events.extend(events)
        r.info = _replace(r.info, last_seq=events[-1].seq, status=final_status or "running")
        if final_status is not None:  # the session is free as the reply's end is stored
            s.running = None
            s.lock_token = None
        self._notify()
        return AppendResult(cancel_requested=r.info.cancel_requested)

    async def request_cancel(
        self, user_id: str, session_id: str, reply_id: str
    ) -> ReplyInfo | None:
        s = self._sessions.get((user_id, session_id))
        r = s.replies.get(reply_id) if s else None
        if r is None:
            return None
        if r.info.status == "running":
            r.info = _replace(r.info, cancel_requested=True)
        return r.info

    async def get_reply(self, user_id: str, session_id: str, reply_id: str) -> ReplyInfo | None:
        s = self._sessions.get((user_id, session_id))
        r = s.replies.get(reply_id) if s else None
        return r.info if r else None

    async def list_replies(self, user_id: str, session_id: str) -> list[ReplyInfo]:
        s = self._sessions.get((user_id, session_id))
        return [r.info for r in s.replies.values()] if s else []

    async def read_events(
        self, user_id: str, session_id: str, reply_id: str, after: int, wait: float
    ) -> list[StoredEvent]:
        deadline = time.monotonic() + wait
        while True:
            s = self._sessions.get((user_id, session_id))
            r = s.replies.get(reply_id) if s else None
            if r is None:
                return []
            found = r.events[after:] if after >= 0 else r.events
            if found:
                return list(found)
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return []

    async def lock_token(self, user_id: str, session_id: str) -> int | None:
        s = self._sessions.get((user_id, session_id))
        if s is None or s.lock_token is None or s.lock_expires <= time.monotonic():
            return None
        return s.lock_token


def _replace(info: ReplyInfo, **changes: object) -> ReplyInfo:
    from dataclasses import replace

    return replace(info, **changes)  # type: ignore[arg-type]


def store_from_url(url: str) -> ServiceStoreBase:
    """The store for a URL: ``memory://``, ``redis://``/``rediss://``/``unix://``, or
    ``postgresql://`` (also ``postgres://`` and ``postgresql+asyncpg://``).

    Raises:
        UserError: another scheme (the message lists the supported ones).
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "memory":
        return InMemoryServiceStore()
    if scheme in ("redis", "rediss", "unix"):
        from mnemoscope.service._redis_store import RedisServiceStore

        return RedisServiceStore(url)
    if scheme in ("postgresql", "postgres", "postgresql+asyncpg"):
        from mnemoscope.service._pg_store import PostgresServiceStore

        return PostgresServiceStore(url)
    raise UserError(
        f"service store URL {url!r} is not supported: use memory:// (one process), "
        "redis://host:6379/0 or postgresql://user@host:5432/db"
    )
