"""LocalLongTermMemory across processes: SIGKILL mid-write, concurrent writers."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mnemoscope.memory._local_ltm import LocalLongTermMemory

SRC = Path(__file__).resolve().parents[2] / "src"
BATCH = 2000

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX signals")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    return env


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def _consistent(path: Path) -> tuple[int, int, int]:
    """(memories, fts rows, history rows) after SQLite's and FTS5's own integrity checks."""
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.execute("INSERT INTO ltm_fts (ltm_fts) VALUES ('integrity-check')")
        memories = conn.execute("SELECT count(*) FROM ltm_memories").fetchone()[0]
        fts = conn.execute("SELECT count(*) FROM ltm_fts").fetchone()[0]
        orphans = conn.execute(
            "SELECT count(*) FROM ltm_fts WHERE rowid NOT IN (SELECT rid FROM ltm_memories)"
        ).fetchone()[0]
        orphans += conn.execute(
            "SELECT count(*) FROM ltm_vectors WHERE rid NOT IN (SELECT rid FROM ltm_memories)"
        ).fetchone()[0]
        history = conn.execute("SELECT count(*) FROM ltm_history").fetchone()[0]
    assert orphans == 0
    return memories, fts, history


WRITER_FOREVER = """
import asyncio, os, sys, time
from mnemoscope.memory._local_ltm import LocalLongTermMemory

async def main():
    store = LocalLongTermMemory(sys.argv[1])
    n = 0
    while True:
        size = int(sys.argv[2])
        texts = [f"{os.getpid()} batch {n} memory {i} topic {i % 97}" for i in range(size)]
        started = time.perf_counter()
        await store.record(texts, user_id="u")
        n += 1
        print("committed", n, time.perf_counter() - started, flush=True)

asyncio.run(main())
"""


@pytest.mark.slow
def test_sigkill_mid_batch_leaves_a_consistent_store(tmp_path: Path) -> None:
    path = tmp_path / "ltm.db"
    for delay in (0.2, 0.5, 0.8):
        proc = _spawn(WRITER_FOREVER, str(path), str(BATCH))
        assert proc.stdout is not None
        line = proc.stdout.readline()  # one batch committed: the next one is being written
        assert line.startswith("committed"), proc.stderr.read() if proc.stderr else line
        time.sleep(delay * float(line.split()[2]))  # kill within the next batch
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        memories, fts, history = _consistent(path)
        assert memories == fts == history  # every memory indexed and logged, nothing else
        assert memories > 0 and memories % BATCH == 0  # whole batches only
    assert memories >= 3 * BATCH


CONCURRENT_WRITER = """
import asyncio, sys
from mnemoscope.memory._local_ltm import LocalLongTermMemory

async def main():
    worker = sys.argv[2]
    async with LocalLongTermMemory(sys.argv[1], busy_timeout=60) as store:
        for i in range(40):
            await store.record(f"worker {worker} note {i}", user_id="shared")
            await store.record("the one fact every worker knows", user_id="shared")
            await store.record(f"private note {i}", user_id=f"user-{worker}")

asyncio.run(main())
"""


@pytest.mark.slow
async def test_concurrent_writers_from_several_processes(tmp_path: Path) -> None:
    path = tmp_path / "ltm.db"
    async with LocalLongTermMemory(path) as store:  # create the file before the race
        await store.record("seed", user_id="seed")
    procs = [_spawn(CONCURRENT_WRITER, str(path), str(w)) for w in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    memories, fts, history = _consistent(path)
    assert memories == fts == history == 1 + 4 * 40 + 1 + 4 * 40
    async with LocalLongTermMemory(path) as store:
        shared = await store.list(user_id="shared")
        assert len(shared) == 4 * 40 + 1
        assert sum(m.content == "the one fact every worker knows" for m in shared) == 1
        for w in range(4):
            private = await store.list(user_id=f"user-{w}")
            assert [m.content for m in private] == [f"private note {i}" for i in range(40)]
        hits = await store.retrieve("worker 3 note 17", user_id="shared", limit=2)
        # "worker 17 note 3" has the same words, hence the same BM25 score
        assert "worker 3 note 17" in [h.content for h in hits]
