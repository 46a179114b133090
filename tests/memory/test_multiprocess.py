"""Several processes writing one session: nothing lost, nothing duplicated, order kept."""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable
from pathlib import Path

import pytest

from mnemoscope.memory import MemoryBase

MakeMemory = Callable[..., MemoryBase]
PROCESSES = 4
PER_WRITER = 24


@pytest.fixture(params=["redis", "sqlite", "postgres", "mariadb"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.slow
@pytest.mark.services
async def test_processes_writing_one_session(
    make_memory: MakeMemory, backend: str, backend_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = make_memory(session_id="multi")
    await mem.add([])  # SQL: create the tables before the processes race for them
    await mem.size()
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # spawned children inherit it
    import _mp_writer

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    procs = [
        ctx.Process(
            target=_mp_writer.write,
            args=(backend, backend_url, mem.user_id, "multi", w, PER_WRITER, barrier),
        )
        for w in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * PROCESSES

    got = [m.get_text_content() for m in await mem.get()]
    pairs = PER_WRITER // 4
    assert len(got) == len(set(got)) == PROCESSES * (PER_WRITER + pairs)
    for w in range(PROCESSES):
        expected: list[str] = []
        for i in range(PER_WRITER):
            expected += [f"{w}:{i}:use", f"{w}:{i}:result"] if i % 4 == 3 else [f"{w}:{i}"]
        assert [t for t in got if t.startswith(f"{w}:")] == expected
        for i in range(3, PER_WRITER, 4):
            assert got[got.index(f"{w}:{i}:use") + 1] == f"{w}:{i}:result"
    assert len(await mem.get(marks="pair")) == PROCESSES * pairs * 2
    # writers interleaved (the test exercised concurrency, not four serial runs)
    owners = [t.split(":")[0] for t in got]
    switches = sum(1 for a, b in itertools.pairwise(owners) if a != b)
    assert switches > PROCESSES
