"""Shared state of the service: sessions, reply event logs and the per-session lock.

A store is chosen by URL (:func:`store_from_url`):

===========================  ===================================================  ===========
URL                          store                                                scope
===========================  ===================================================  ===========
``memory://``                :class:`~mnemoscope.service.InMemoryServiceStore`    a process
``sqlite:///path.db``        :class:`~mnemoscope.service.SQLiteServiceStore`      a machine
``redis://``, ``rediss://``  :class:`~mnemoscope.service.RedisServiceStore`       any
``postgresql://`` (asyncpg)  :class:`~mnemoscope.service.PostgresServiceStore`    any
===========================  ===================================================  ===========

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

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import ClassVar, Literal, TypeVar

from mnemoscope._redact import redact_text
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


@dataclass(frozen=True)
class SessionKey:
    """Where a session lives: every store call names the user with the session."""

    user_id: str
    session_id: str


@dataclass(frozen=True)
class ReplyKey(SessionKey):
    """Where a reply lives: in its user's session."""

    reply_id: str


class ServiceStoreBase(ABC):
    """Where sessions, reply event logs and session locks live (see the module docstring).

    The lock and log calls (:meth:`acquire`, :meth:`heartbeat`, :meth:`append`) check their
    arguments here and leave the storage to a backend's ``_acquire``, ``_heartbeat`` and
    ``_append``.
    """

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
    async def acquire(
        self,
        user_id: str,
        session_id: str,
        ttl: float,
        failed_event: str,
        reply_id: str | None = None,
    ) -> AcquireResult:
        """Take the session's lock (see module docstring); never waits. With ``reply_id``
        the reply is also started (as :meth:`start_reply`) in the same atomic step.

        Raises:
            ValueError: ``ttl`` is not positive.
        """
        _check_ttl(ttl)
        return await self._acquire(SessionKey(user_id, session_id), ttl, failed_event, reply_id)

    async def heartbeat(
        self, user_id: str, session_id: str, token: int, ttl: float, reply_id: str | None
    ) -> AppendResult:
        """Extend the lock by ``ttl``; says whether it was lost and whether ``reply_id``
        was asked to stop.

        Raises:
            ValueError: ``ttl`` is not positive.
        """
        _check_ttl(ttl)
        return await self._heartbeat(SessionKey(user_id, session_id), token, ttl, reply_id)

    @abstractmethod
    async def release(self, user_id: str, session_id: str, token: int) -> None:
        """Free the lock when ``token`` still holds it."""

    @abstractmethod
    async def lock_token(self, user_id: str, session_id: str) -> int | None:
        """The token holding the session's lock now, or ``None`` when it is free."""

    # ----------------------------------------------------------------- replies
    @abstractmethod
    async def start_reply(self, user_id: str, session_id: str, reply_id: str, token: int) -> bool:
        """Record a running reply; ``False`` when fenced."""

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

        Raises:
            ValueError: ``events`` is empty or its ``seq`` numbers are not consecutive.
        """
        if not events or any(b.seq != a.seq + 1 for a, b in pairwise(events)):
            seqs = [e.seq for e in events]
            raise ValueError(f"append needs events with consecutive seq numbers, got {seqs}")
        where = ReplyKey(user_id, session_id, reply_id)
        return await self._append(where, token, events, final_status)

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

    # ------------------------------------------------------------ backend hooks
    @abstractmethod
    async def _acquire(
        self, key: SessionKey, ttl: float, failed_event: str, reply_id: str | None
    ) -> AcquireResult:
        """:meth:`acquire` with checked arguments, as one atomic step."""

    @abstractmethod
    async def _heartbeat(
        self, key: SessionKey, token: int, ttl: float, reply_id: str | None
    ) -> AppendResult:
        """:meth:`heartbeat` with checked arguments."""

    @abstractmethod
    async def _append(
        self, key: ReplyKey, token: int, events: list[StoredEvent], final: ReplyStatus | None
    ) -> AppendResult:
        """:meth:`append` with a non-empty run of consecutive events, as one atomic step."""


def _check_ttl(ttl: float) -> None:
    if not ttl > 0:
        raise ValueError(f"the lock ttl must be a positive number of seconds, got {ttl!r}")


class ServerStoreBase(ServiceStoreBase):
    """A store on a database server: shows its URL masked, and turns the driver's errors
    into :class:`ServiceStoreError` (retrying once what is harmless to repeat)."""

    server_name: ClassVar[str]
    """``Redis``, ``PostgreSQL``: how the errors name the server."""
    dropped_errors: ClassVar[tuple[type[BaseException], ...]]
    """The driver's errors for a lost connection."""
    driver_errors: ClassVar[tuple[type[BaseException], ...]]
    """Any other error of the driver."""

    @property
    def url_safe(self) -> str:
        """The URL to show: password and secret query values (``?password=``) masked."""
        return redact_text(self.url)

    async def _call(self, what: str, op: Callable[[], Awaitable[_T]], *, retry: bool) -> _T:
        """Run ``op()``: a lost connection runs it once more when ``retry`` says the call is
        harmless to repeat; what still fails becomes "<server> failed to ``what``"."""
        for attempt in (1, 2):
            try:
                return await op()
            except self.dropped_errors as exc:
                if attempt == 2 or not retry:
                    raise self._failed(what, exc) from exc
            except self.driver_errors as exc:
                raise self._failed(what, exc) from exc
        raise AssertionError("unreachable")

    def _failed(self, what: str, exc: BaseException) -> ServiceStoreError:
        return ServiceStoreError(f"{self.server_name} at {self.url_safe} failed to {what}: {exc}")


def store_from_url(url: str) -> ServiceStoreBase:
    """The store for a URL: ``memory://``, ``sqlite:///path.db``,
    ``redis://``/``rediss://``/``unix://``, or ``postgresql://`` (also ``postgres://`` and
    ``postgresql+asyncpg://``).

    Raises:
        UserError: another scheme (the message lists the supported ones).
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "memory":
        from mnemoscope.service._memory_store import InMemoryServiceStore

        return InMemoryServiceStore()
    if scheme in ("redis", "rediss", "unix"):
        from mnemoscope.service._redis_store import RedisServiceStore

        return RedisServiceStore(url)
    if scheme == "sqlite":
        from mnemoscope.service._sqlite_store import SQLiteServiceStore

        return SQLiteServiceStore(url)
    if scheme in ("postgresql", "postgres", "postgresql+asyncpg"):
        from mnemoscope.service._pg_store import PostgresServiceStore

        return PostgresServiceStore(url)
    raise UserError(
        f"service store URL {url!r} is not supported: use memory:// (one process), "
        "sqlite:///path.db (processes of one machine), redis://host:6379/0 or "
        "postgresql://user@host:5432/db"
    )
