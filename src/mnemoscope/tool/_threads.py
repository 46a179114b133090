"""A bounded pool of daemon threads for blocking (sync) tools.

Why not the event loop's default executor: a sync tool that never returns keeps its
thread forever (Python cannot kill a thread). In the default executor a handful of hung
tools exhaust the pool and everything else that uses ``asyncio.to_thread`` (file tools,
the workspace backends) stalls behind them. Each :class:`~mnemoscope.tool.Toolkit` runs
its sync tools here instead:

* at most ``max_threads`` threads run tool calls; more calls wait in a queue (their wait
  counts against their timeout);
* a call whose caller gave up (timeout or cancellation) while it was running is
  *abandoned*: its thread no longer counts against ``max_threads``, so later calls still
  get a thread, and the thread exits when the call finally returns. At most
  ``max_threads`` abandoned threads are tolerated; beyond that the pool stops growing and
  new calls wait (and time out), so hung tools never grow the process without bound;
* threads are daemon threads: a hung tool never blocks interpreter exit;
* idle threads exit after a while, so a toolkit that is dropped leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mnemoscope.errors import UserError

T = TypeVar("T")

_pool_serial = itertools.count(1)

IDLE_SECONDS = 30.0
"""An idle worker thread exits after this long without work."""


@dataclass(eq=False)
class _Job:
    func: Callable[[], Any]
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    running: bool = False
    abandoned: bool = False


class ToolThreadPool:
    """Runs blocking callables on a bounded set of daemon threads (see module docstring).

    Args:
        max_threads: how many calls may run at once.
        name: prefix of the thread names (shown in debuggers and ``threading.enumerate``);
            unique by default.
    """

    def __init__(self, max_threads: int = 8, *, name: str | None = None) -> None:
        if max_threads < 1:
            raise UserError(f"max_tool_threads must be at least 1, got {max_threads}")
        self.max_threads = max_threads
        self.name = name or f"mnemoscope-tool-{next(_pool_serial)}"
        """Prefix of the names of this pool's threads."""
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live = 0  # threads counted against max_threads
        self._idle = 0
        self._abandoned = 0  # threads still running a call whose caller gave up
        self._pending = 0  # jobs queued, not yet picked up
        self._closed = False
        self._serial = 0

    @property
    def abandoned(self) -> int:
        """Threads still busy with a call whose caller gave up (hung tools)."""
        return self._abandoned

    async def run(self, func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``func(*args, **kwargs)`` on a pool thread and await its result.

        Cancelling the awaiting task (e.g. a timeout) drops a call that has not started
        and abandons one that has (see module docstring); the cancellation propagates.
        """
        job = self._submit(lambda: func(*args, **kwargs))
        try:
            return await asyncio.wrap_future(job.future)
        except BaseException:
            self._give_up(job)
            raise

    def close(self) -> None:
        """Stop idle threads; calls already running finish on their own. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle = self._idle
        for _ in range(idle):
            self._queue.put(None)

    # ---------------------------------------------------------------- internals
    def _submit(self, func: Callable[[], Any]) -> _Job:
        job = _Job(func)
        with self._lock:
            if self._closed:
                raise UserError("this toolkit's thread pool is closed; build a new Toolkit")
            self._pending += 1
            self._queue.put(job)
            self._maybe_spawn()
        return job

    def _maybe_spawn(self) -> None:
        # called with the lock held
        if (
            self._pending > self._idle
            and self._live < self.max_threads
            and self._live + self._abandoned < 2 * self.max_threads
        ):
            self._live += 1
            self._idle += 1
            self._serial += 1
            thread = threading.Thread(
                target=self._work, name=f"{self.name}-{self._serial}", daemon=True
            )
            thread.start()

    def _give_up(self, job: _Job) -> None:
        if job.future.cancel():
            return  # never started: the worker will skip it
        with self._lock:
            if job.running and not job.abandoned:
                job.abandoned = True
                self._live -= 1
                self._abandoned += 1
                self._maybe_spawn()

    def _work(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._pending:  # a job arrived just now: keep serving
                        continue
                    self._idle -= 1
                    self._live -= 1
                return
            if job is None:  # close()
                with self._lock:
                    self._idle -= 1
                    self._live -= 1
                return
            with self._lock:
                self._pending -= 1
                self._idle -= 1
                job.running = True
            if job.future.set_running_or_notify_cancel():
                try:
                    result = job.func()
                except BaseException as exc:  # handed to the awaiting task, which decides
                    job.future.set_exception(exc)
                else:
                    job.future.set_result(result)
            with self._lock:
                job.running = False
                if job.abandoned:
                    # replaced while it hung: rejoin the pool if it has room, else leave
                    self._abandoned -= 1
                    if self._closed or self._live >= self.max_threads:
                        return
                    self._live += 1
                elif self._closed:
                    self._live -= 1
                    return
                self._idle += 1
            del job


_default_pool: ToolThreadPool | None = None
_default_lock = threading.Lock()


def default_tool_pool() -> ToolThreadPool:
    """The pool used by sync tools called outside a toolkit (never the loop's executor)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = ToolThreadPool(8, name="mnemoscope-tool-default")
        return _default_pool
