"""The SQLite fast path's worker thread: closing it is safe from a finalizer.

The garbage collector runs finalizers in the middle of any code, including a
``ThreadPoolExecutor.submit``, which holds a lock shared by every executor. The worker
used to close through its own executor's ``submit``: a finalizer that closed an unused
engine's worker inside a submit waited for the lock its own thread held, and the test
process hung with no output (the CI of stop 19).
"""

from __future__ import annotations

import asyncio
import concurrent.futures.thread as cf_thread
import sqlite3
import threading
from pathlib import Path

import pytest

from mnemoscope.memory import AsyncSQLAlchemyMemory
from mnemoscope.memory._sqlalchemy_sqlite import SQLiteWorker
from mnemoscope.message import UserMsg


def _worker(path: Path) -> SQLiteWorker:
    return SQLiteWorker(str(path), uri=False, configure=True, busy_timeout_ms=1000)


async def test_close_takes_no_lock_an_executor_submit_may_hold(tmp_path: Path) -> None:
    worker = _worker(tmp_path / "a.db")
    assert await worker.run(lambda conn: conn.execute("SELECT 1").fetchone()[0]) == 1
    closer = threading.Thread(target=worker.close)
    # what a submit holds while the garbage collector may run a finalizer
    with cf_thread._global_shutdown_lock:
        closer.start()
        closer.join(5)
        finished = not closer.is_alive()
    closer.join()
    assert finished, "SQLiteWorker.close() waited for an executor lock"
    with pytest.raises(RuntimeError, match="is closed"):
        await worker.run(lambda conn: 1)


async def test_queued_work_runs_before_the_close_and_the_connection_is_closed(
    tmp_path: Path,
) -> None:
    worker = _worker(tmp_path / "b.db")
    seen: list[sqlite3.Connection] = []

    def slow(conn: sqlite3.Connection, n: int) -> int:
        seen.append(conn)
        return n

    calls = [asyncio.ensure_future(worker.run(slow, n)) for n in range(20)]
    await asyncio.sleep(0)  # queued, then the close queued behind them
    worker.close(wait=5)
    assert await asyncio.gather(*calls) == list(range(20))
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        seen[0].execute("SELECT 1")


async def test_an_error_in_the_worker_reaches_the_caller_and_the_worker_goes_on(
    tmp_path: Path,
) -> None:
    worker = _worker(tmp_path / "c.db")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await worker.run(lambda conn: conn.execute("SELECT * FROM nowhere").fetchall())
    assert await worker.run(lambda conn: conn.execute("SELECT 2").fetchone()[0]) == 2
    worker.close(wait=5)


async def test_a_memory_whose_engine_is_collected_leaves_the_file_usable(tmp_path: Path) -> None:
    import gc

    url = f"sqlite+aiosqlite:///{tmp_path / 'd.db'}"
    mem = AsyncSQLAlchemyMemory(url, user_id="u", session_id="s")
    await mem.add(UserMsg("u", "kept"))
    await mem.engine.dispose()
    del mem
    gc.collect()  # the engine's finalizer closes its worker
    async with AsyncSQLAlchemyMemory(url, user_id="u", session_id="s") as again:
        assert [m.get_text_content() for m in await again.get()] == ["kept"]


async def test_aclose_returns_once_the_connection_is_closed(tmp_path: Path) -> None:
    # a process that exits right after aclose() must not leave the WAL's -wal/-shm files
    # behind (seen under load: the worker's close was still queued when the process ended)
    import time

    from mnemoscope.memory._sqlalchemy_sqlite import _WORKERS

    db = tmp_path / "chat.db"
    memory = AsyncSQLAlchemyMemory(f"sqlite+aiosqlite:///{db}", session_id="s")
    await memory.add(UserMsg("a", "hello"))
    worker = _WORKERS[memory.engine.sync_engine]
    assert worker is not None
    slow = asyncio.ensure_future(worker.run(lambda conn: time.sleep(0.3)))
    await asyncio.sleep(0.05)  # the worker is busy with the slow job, its connection open
    await memory.aclose()
    assert not (tmp_path / "chat.db-wal").exists()
    assert not (tmp_path / "chat.db-shm").exists()
    await slow
