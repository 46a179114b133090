"""One reply running in this process: drives the agent, writes its events to the store.

The agent never waits for the store: its events go to a queue that one writer task
appends in batches: a burst of events (each within ``FLUSH_WINDOW`` of the last, for at most
``FLUSH_MAX``) is one round trip, and the terminal event is written at once with whatever
is pending. A plain reply (``reply_start``, ``reasoning_start`` and ``context`` a few
milliseconds apart, then the model's answer with ``reply_end``) is two appends. Readers in this
process follow the events the store has acknowledged, straight from memory; readers in
other processes read the store. Either way a reader sees each stored event once, in order.

A heartbeat task renews the session lock and polls for a cancel request; when the lock
turns out to belong to another holder (this process stalled past the lock's expiry), the
reply is stopped and nothing more is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from mnemoscope.errors import ServiceStoreError
from mnemoscope.service._events import (
    TERMINAL_TYPES,
    ReplyCancelledEvent,
    ReplyFailedEvent,
)
from mnemoscope.service._settings import ServiceSettings
from mnemoscope.service._store import ReplyKey, ReplyStatus, ServiceStoreBase, StoredEvent

logger = logging.getLogger("mnemoscope.service")

StreamFactory = Callable[[], Awaitable[AsyncIterator[Any]]]

FLUSH_WINDOW = 0.005
"""Seconds of quiet after an event before the writer stores what is pending (never waited
for the terminal event): a model streaming many deltas a second costs a few store writes a
second, not one each."""

FLUSH_MAX = 0.02
"""Most seconds an event waits in a burst that does not stop."""


class ReplyRunner:
    """A running reply (see module docstring)."""

    def __init__(
        self, store: ServiceStoreBase, key: ReplyKey, token: int, settings: ServiceSettings
    ) -> None:
        self.store = store
        self.key = key
        self.reply_id = key.reply_id
        self.token = token
        self.settings = settings
        self.events: list[StoredEvent] = []
        """Events the store acknowledged; ``events[k].seq == k + 1``."""
        self.closed = False
        """No more events will be added here (a terminal event, or the lock was lost)."""
        self.lost = False
        self._seq = 0
        self._pending: list[tuple[StoredEvent, ReplyStatus | None]] = []
        self._wake_writer = asyncio.Event()
        self._idle = asyncio.Event()
        self._changed = asyncio.Event()
        self._cancel_reason: str | None = None
        self._final_sent = False
        self.task: asyncio.Task[None] | None = None

    @property
    def _where(self) -> tuple[str, str]:
        return self.key.user_id, self.key.session_id

    # -------------------------------------------------------------------- control
    def start(self, stream: StreamFactory) -> None:
        self.task = asyncio.create_task(self._run(stream), name=f"reply-{self.reply_id}")

    def cancel(self, reason: str) -> None:
        """Stop the reply; it ends with ``reply_cancelled`` (``reason``)."""
        if self.task is not None and not self.task.done() and self._cancel_reason is None:
            self._cancel_reason = reason
            self.task.cancel()

    async def wait(self) -> None:
        """Until the reply's task ended (however it ended)."""
        if self.task is not None:
            await asyncio.wait({self.task})

    # -------------------------------------------------------------------- readers
    async def follow(self, after: int) -> AsyncIterator[list[StoredEvent]]:
        """Stored events with ``seq > after``, as they are acknowledged, until closed; each
        batch holds every event that was there."""
        i = max(after, 0)
        while True:
            if i < len(self.events):
                batch = self.events[i:]
                i += len(batch)
                yield batch
            if self.closed and i >= len(self.events):
                return
            if i >= len(self.events):
                await self._changed.wait()

    @property
    def finished(self) -> bool:
        """The last event here is terminal (no need to look at the store)."""
        return bool(self.events) and self.events[-1].type in TERMINAL_TYPES

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # ---------------------------------------------------------------------- run
    def _emit(self, event_type: str, data: str, final: ReplyStatus | None = None) -> None:
        self._idle.clear()
        self._seq += 1
        self._pending.append((StoredEvent(self._seq, event_type, data), final))
        self._wake_writer.set()

    async def _run(self, stream: StreamFactory) -> None:
        writer = asyncio.create_task(self._writer())
        beat = asyncio.create_task(self._heartbeat())
        try:
            try:
                events = await stream()
                try:
                    async for event in events:
                        final: ReplyStatus | None = "done" if event.type == "reply_end" else None
                        self._emit(event.type, event.model_dump_json(), final)
                finally:
                    await events.aclose()  # type: ignore[attr-defined]
                if not self._terminal_emitted:
                    raise RuntimeError("the agent's event stream ended without reply_end")
            except asyncio.CancelledError:
                if not self.lost:
                    reason: Any = self._cancel_reason or "shutdown"
                    end = ReplyCancelledEvent(reply_id=self.reply_id, reason=reason)
                    self._emit(end.type, end.model_dump_json(), "cancelled")
                    await _uncancelled(self._drain(writer))
                raise
            except Exception as exc:
                logger.warning("reply %s failed: %s", self.reply_id, exc, exc_info=True)
                failed = ReplyFailedEvent(
                    reply_id=self.reply_id,
                    reason="error",
                    message=f"{type(exc).__name__}: {exc}"[:2000],
                )
                self._emit(failed.type, failed.model_dump_json(), "failed")
            # the terminal event must reach the store even if a cancel arrives now
            await _uncancelled(self._drain(writer))
        finally:
            beat.cancel()
            writer.cancel()
            self.closed = True
            self._notify()
            if not self.lost and not self.finished:  # a stored end freed the lock already
                with contextlib.suppress(ServiceStoreError):
                    await _uncancelled(self.store.release(*self._where, self.token))

    @property
    def _terminal_emitted(self) -> bool:
        return any(e.type in TERMINAL_TYPES for e, _ in self._pending) or self.finished

    async def _drain(self, writer: asyncio.Task[None]) -> None:
        """Wait until the writer stored every event (or gave up)."""
        idle = asyncio.ensure_future(self._idle.wait())
        try:
            await asyncio.wait({writer, idle}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()

    async def _writer(self) -> None:
        while True:
            await self._wake_writer.wait()
            self._wake_writer.clear()
            await self._burst()
            while self._pending:
                batch = list(self._pending)
                final = next((f for _, f in batch if f is not None), None)
                events = [e for e, _ in batch]
                if final is not None:
                    self._final_sent = True
                result = await self._append(events, final)
                if self.lost:  # the heartbeat found the lock gone meanwhile
                    return
                if result is None or result.fenced:
                    self._lose("store_unavailable" if result is None else "worker_lost")
                    return
                del self._pending[: len(batch)]
                self.events.extend(events)
                self._notify()
                if result.cancel_requested and final is None:
                    self.cancel("requested")
            self._idle.set()

    async def _burst(self) -> None:
        """Wait while the agent's events keep coming (see ``FLUSH_WINDOW``, ``FLUSH_MAX``);
        at once when the terminal event is pending."""
        loop = asyncio.get_running_loop()
        cap = loop.time() + FLUSH_MAX
        while not any(f is not None for _, f in self._pending):
            left = min(FLUSH_WINDOW, cap - loop.time())
            if left <= 0:
                return
            seen = len(self._pending)
            timer = loop.call_later(left, self._wake_writer.set)
            await self._wake_writer.wait()
            self._wake_writer.clear()
            timer.cancel()
            if len(self._pending) == seen:  # quiet for FLUSH_WINDOW
                return

    async def _append(self, events: list[StoredEvent], final: ReplyStatus | None) -> Any:
        """Append, retrying a store that is down for up to the lock's lifetime."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.settings.lock_ttl
        while True:
            try:
                return await self.store.append(
                    *self._where, self.reply_id, self.token, events, final
                )
            except ServiceStoreError as exc:
                if loop.time() >= give_up:
                    logger.error("reply %s: store unavailable, reply lost: %s", self.reply_id, exc)
                    return None
                await asyncio.sleep(min(0.5, self.settings.lock_ttl / 10))

    def _lose(self, reason: str = "worker_lost") -> None:
        """The lock is gone (or the store is): stop without writing anything more.

        Readers in this process are told with a ``reply_failed`` event that is not
        stored (the next holder of the session stores its own when it takes over)."""
        if self.finished or self.lost:  # the terminal append freed the lock itself
            return
        self.lost = True
        message = (
            "the service store stayed unreachable; the reply was stopped"
            if reason == "store_unavailable"
            else "another process took over the session (this one stalled past the lock's "
            "expiry); the reply was stopped"
        )
        failed = ReplyFailedEvent(reply_id=self.reply_id, reason=reason, message=message)  # type: ignore[arg-type]
        self.events.append(StoredEvent(len(self.events) + 1, failed.type, failed.model_dump_json()))
        self._notify()
        self._pending.clear()
        self._idle.set()
        if self.task is not None and not self.task.done():
            self._cancel_reason = self._cancel_reason or "lost"
            self.task.cancel()

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.settings.poll_interval)
            try:
                result = await self.store.heartbeat(
                    *self._where, self.token, self.settings.lock_ttl, self.reply_id
                )
            except ServiceStoreError as exc:
                logger.warning("reply %s: cannot renew the session lock: %s", self.reply_id, exc)
                continue
            if result.fenced:
                if self._final_sent:  # storing the reply's end freed the lock: not a loss
                    return
                self._lose()
                return
            if result.cancel_requested:
                self.cancel("requested")


async def _uncancelled(aw: Awaitable[Any]) -> Any:
    """Await ``aw`` to the end even while this task is being cancelled (cleanup)."""
    task = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise
