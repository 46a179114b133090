"""The ``memory://`` service store: everything in this process (one worker, tests, demos)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace

from mnemoscope.service._store import (
    Acquired,
    AcquireResult,
    AppendResult,
    Busy,
    NoSession,
    ReplyInfo,
    ReplyKey,
    ReplyStatus,
    ServiceStoreBase,
    SessionInfo,
    SessionKey,
    StoredEvent,
)


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

    async def _acquire(
        self, key: SessionKey, ttl: float, failed_event: str, reply_id: str | None
    ) -> AcquireResult:
        s = self._sessions.get((key.user_id, key.session_id))
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
            await self.start_reply(key.user_id, key.session_id, reply_id, s.fence)
        return Acquired(s.fence, recovered)

    async def _heartbeat(
        self, key: SessionKey, token: int, ttl: float, reply_id: str | None
    ) -> AppendResult:
        s = self._sessions.get((key.user_id, key.session_id))
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

    async def _append(
        self, key: ReplyKey, token: int, events: list[StoredEvent], final: ReplyStatus | None
    ) -> AppendResult:
        s = self._sessions.get((key.user_id, key.session_id))
        r = s.replies.get(key.reply_id) if s else None
        if s is None or r is None or not self._locked_by(s, token) or r.token != token:
            return AppendResult(fenced=True)
        if events[-1].seq <= r.info.last_seq:  # a repeated append
            return AppendResult(cancel_requested=r.info.cancel_requested)
        if r.info.status != "running" or events[0].seq != r.info.last_seq + 1:
            return AppendResult(fenced=True)
        r.events.extend(events)
        r.info = _replace(r.info, last_seq=events[-1].seq, status=final or "running")
        if final is not None:  # the session is free as the reply's end is stored
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
    return replace(info, **changes)  # type: ignore[arg-type]
