"""Short-term memory throughput: mnemoscope beside AgentScope 1.0.21, same run, same servers.

Usage::

    python bench/short_term_memory.py --n 10000
    python bench/short_term_memory.py --n 2000 --backends inmemory,redis,sqlite

For every backend (in memory, Redis, SQLite, PostgreSQL, MariaDB) it measures, on a session
of ``--n`` messages:

* ``add 1/call @0``   single-message ``add`` calls on an empty session (msg/s);
* ``add 1/call @n``   the same once the session holds ``n`` messages (msg/s): equal to the
                      previous row when add cost does not grow with session length;
* ``add batch``       ``add`` of ``--batch`` messages per call (msg/s);
* ``get all``         ``get()`` of the whole session (calls/s);
* ``get by mark``     ``get(marks="hint")``, 10% of the messages carry the mark (calls/s);
* ``delete half``     one ``delete`` of ``n/2`` ids (msg/s).

* ``commit ceiling``  PostgreSQL and MariaDB only: one-row ``INSERT`` statements in
                      autocommit through the same engine, measured by each side around its
                      single adds. Every single-message ``add`` (of either library) is at
                      least one commit that waits for the server's log flush, so this bounds
                      ``add 1/call`` on that disk at that moment.

Backends are measured one at a time, AgentScope then mnemoscope back to back, because the
machine's disk and CPU are shared and their load drifts over minutes.

PostgreSQL tables are ``ANALYZE``-d after the bulk load, on both sides: autovacuum would do
the same within a minute, and without statistics the planner picks poor plans for
freshly filled tables (for both libraries). Single adds and reads are time-boxed
(``--budget`` seconds each), so slow backends report a rate over fewer calls. The
AgentScope side runs in a subprocess with the Python of a side virtualenv
(``--agentscope-python``, env ``MNEMOSCOPE_AS1_PYTHON``, default
``/work/side/as1/bin/python``). Create it with::

    python -m venv /work/side/as1
    /work/side/as1/bin/pip install agentscope==1.0.21 "mcp<2" "sqlalchemy[asyncio]" tqdm \\
        redis aiosqlite asyncpg aiomysql

Prints a markdown table; never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

BACKENDS = ["inmemory", "redis", "sqlite", "postgres", "mariadb"]
OPS = ["add 1/call @0", "add 1/call @n", "add batch", "get all", "get by mark", "delete half"]
SERVER_SQL = ("postgres", "mariadb")
UNITS = {"get all": "calls/s", "get by mark": "calls/s"}
TEXT = "The quick brown fox jumps over the lazy dog. " * 4


class Side:
    """What a library needs to provide to be measured (one per library)."""

    name = ""

    def new_msg(self, i: int) -> Any: ...
    async def make(self, backend: str, session: str, cfg: dict[str, Any]) -> Any: ...
    async def add(self, mem: Any, msgs: Any, marks: str | None = None) -> None: ...
    async def get_all(self, mem: Any) -> list[Any]: ...
    async def get_mark(self, mem: Any, mark: str) -> list[Any]: ...
    async def delete(self, mem: Any, ids: list[str]) -> None: ...
    async def size(self, mem: Any) -> int: ...
    async def finish(self, mem: Any) -> None: ...

    _engines: dict[str, Any]

    async def analyze(self, backend: str) -> None:
        """PostgreSQL: refresh planner statistics after the bulk load (steady state)."""
        if backend == "postgres":
            from sqlalchemy import text

            async with self._engines[backend].connect() as conn:
                await conn.execute(text("ANALYZE"))
                await conn.commit()


class Mnemoscope(Side):
    name = "mnemoscope"

    def __init__(self) -> None:
        from mnemoscope.message import UserMsg

        self._user_msg = UserMsg
        self._engines: dict[str, Any] = {}

    def new_msg(self, i: int) -> Any:
        return self._user_msg("user", f"{i} {TEXT}")

    async def make(self, backend: str, session: str, cfg: dict[str, Any]) -> Any:
        from mnemoscope.memory import AsyncSQLAlchemyMemory, InMemoryMemory, RedisMemory

        kw = {"user_id": "bench", "session_id": session}
        if backend == "inmemory":
            return InMemoryMemory(**kw)
        if backend == "redis":
            return RedisMemory.from_url(cfg["redis_url"], key_prefix="bench", **kw)
        if backend not in self._engines:
            self._engines[backend] = AsyncSQLAlchemyMemory.create_engine(cfg[f"{backend}_url"])
        return AsyncSQLAlchemyMemory(self._engines[backend], table_prefix="bench", **kw)

    async def add(self, mem: Any, msgs: Any, marks: str | None = None) -> None:
        await mem.add(msgs, marks)

    async def get_all(self, mem: Any) -> list[Any]:
        return await mem.get()

    async def get_mark(self, mem: Any, mark: str) -> list[Any]:
        return await mem.get(marks=mark)

    async def delete(self, mem: Any, ids: list[str]) -> None:
        await mem.delete(ids)

    async def size(self, mem: Any) -> int:
        return await mem.size()

    async def finish(self, mem: Any) -> None:
        await mem.clear()
        await mem.aclose()


class AgentScope(Side):
    name = "agentscope"

    def __init__(self) -> None:
        from agentscope.message import Msg

        self._msg = Msg
        self._engines: dict[str, Any] = {}

    def new_msg(self, i: int) -> Any:
        return self._msg(name="user", content=f"{i} {TEXT}", role="user")

    async def make(self, backend: str, session: str, cfg: dict[str, Any]) -> Any:
        from agentscope.memory import AsyncSQLAlchemyMemory, InMemoryMemory, RedisMemory

        if backend == "inmemory":
            return InMemoryMemory()
        if backend == "redis":
            from urllib.parse import urlparse

            u = urlparse(cfg["redis_url"])
            return RedisMemory(
                session_id=session,
                user_id="bench",
                host=u.hostname or "localhost",
                port=u.port or 6379,
                db=int((u.path or "/0").lstrip("/") or 0),
                key_prefix="asbench",
            )
        if backend not in self._engines:
            from sqlalchemy.ext.asyncio import create_async_engine

            self._engines[backend] = create_async_engine(cfg[f"{backend}_url"])
        return AsyncSQLAlchemyMemory(self._engines[backend], session_id=session, user_id="bench")

    async def add(self, mem: Any, msgs: Any, marks: str | None = None) -> None:
        await mem.add(msgs, marks)

    async def get_all(self, mem: Any) -> list[Any]:
        return await mem.get_memory(prepend_summary=False)

    async def get_mark(self, mem: Any, mark: str) -> list[Any]:
        return await mem.get_memory(mark=mark, prepend_summary=False)

    async def delete(self, mem: Any, ids: list[str]) -> None:
        await mem.delete(ids)

    async def size(self, mem: Any) -> int:
        return await mem.size()

    async def finish(self, mem: Any) -> None:
        await mem.clear()
        close = getattr(mem, "close", None)
        if close is not None:
            await close()


async def _timed(calls: int, budget: float, step: Callable[[int], Any]) -> tuple[int, float]:
    """Run ``step(i)`` up to ``calls`` times or until ``budget`` seconds passed."""
    start = time.perf_counter()
    done = 0
    while done < calls:
        await step(done)
        done += 1
        if time.perf_counter() - start > budget:
            break
    return done, time.perf_counter() - start


async def commit_ceiling(engine: Any, budget: float) -> float:
    """One-row ``INSERT`` statements in autocommit through ``engine`` (per second).

    A single-message ``add`` is at least one durable commit, so no library's add rate on
    this server and disk, at that moment, can exceed this number.
    """
    from sqlalchemy import text

    table = f"bench_ceiling_{uuid.uuid4().hex[:8]}"
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v TEXT)"))
        stmt = text(f"INSERT INTO {table} (id, v) VALUES (:i, :v)")
        done, secs = await _timed(2_000, budget, lambda i: conn.execute(stmt, {"i": i, "v": TEXT}))
        await conn.execute(text(f"DROP TABLE {table}"))
    return done / secs


async def measure(side: Side, backend: str, args: argparse.Namespace) -> dict[str, float]:
    cfg = vars(args)
    n, batch, budget = args.n, args.batch, args.budget
    singles = min(n, args.singles)
    res: dict[str, float] = {}
    tag = uuid.uuid4().hex[:8]

    # single adds on an empty session
    mem = await side.make(backend, f"start-{tag}", cfg)
    ceilings = []
    if backend in SERVER_SQL:  # the disk's state while this side runs
        ceilings.append(await commit_ceiling(side._engines[backend], budget / 4))
    msgs = [side.new_msg(i) for i in range(singles)]
    done, secs = await _timed(singles, budget, lambda i: side.add(mem, msgs[i]))
    res["add 1/call @0"] = done / secs
    await side.finish(mem)

    # batch adds up to n messages, 10% of them (every 10th batch) marked "hint"
    mem = await side.make(backend, f"full-{tag}", cfg)
    msgs = [side.new_msg(i) for i in range(n)]
    start = time.perf_counter()
    for b, i in enumerate(range(0, n, batch)):
        await side.add(mem, msgs[i : i + batch], "hint" if b % 10 == 0 else None)
    res["add batch"] = n / (time.perf_counter() - start)
    await side.analyze(backend)

    # single adds once the session holds n messages (then removed again)
    extra = [side.new_msg(n + i) for i in range(singles)]
    done, secs = await _timed(singles, budget, lambda i: side.add(mem, extra[i]))
    res["add 1/call @n"] = done / secs
    if backend in SERVER_SQL:
        ceilings.append(await commit_ceiling(side._engines[backend], budget / 4))
        res["commit ceiling"] = sum(ceilings) / len(ceilings)
    await side.delete(mem, [m.id for m in extra[:done]])

    reads = args.reads
    done, secs = await _timed(reads, budget, lambda i: side.get_all(mem))
    res["get all"] = done / secs
    done, secs = await _timed(reads, budget, lambda i: side.get_mark(mem, "hint"))
    res["get by mark"] = done / secs

    half = [m.id for m in msgs[::2]]
    start = time.perf_counter()
    await side.delete(mem, half)
    res["delete half"] = len(half) / (time.perf_counter() - start)
    remaining = await side.size(mem)
    if remaining != n - len(half):
        res["error"] = float(remaining)  # reported, not asserted
    await side.finish(mem)
    return res


async def run_side(side_name: str, args: argparse.Namespace) -> dict[str, Any]:
    side: Side = Mnemoscope() if side_name == "mnemoscope" else AgentScope()
    out: dict[str, Any] = {}
    for backend in args.backends.split(","):
        print(f"[{side_name}] {backend} ...", file=sys.stderr, flush=True)
        try:
            out[backend] = await measure(side, backend, args)
        except Exception as exc:  # a down server must not hide the other results
            out[backend] = {"failed": f"{type(exc).__name__}: {exc}"[:200]}
    for engine in side._engines.values():
        await engine.dispose()
    return out


def run_agentscope(args: argparse.Namespace) -> dict[str, Any] | str:
    python = args.agentscope_python
    if not os.path.exists(python):
        return (
            f"AgentScope side venv not found at {python}; create it with: python -m venv "
            "/work/side/as1 && /work/side/as1/bin/pip install agentscope==1.0.21 'mcp<2' "
            "'sqlalchemy[asyncio]' tqdm redis aiosqlite asyncpg aiomysql"
        )
    cmd = [python, os.path.abspath(__file__), "--side", "agentscope", *_passthrough(args)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        return f"AgentScope run failed (exit {proc.returncode})"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _passthrough(args: argparse.Namespace) -> list[str]:
    out = []
    for key in ("n", "batch", "budget", "singles", "reads", "backends", "redis_url"):
        out += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    for key in ("sqlite_url", "postgres_url", "mariadb_url"):
        out += [f"--{key.replace('_', '-')}", getattr(args, key)]
    return out


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def table(ours: dict[str, Any], theirs: dict[str, Any] | str, args: argparse.Namespace) -> str:
    lines = [
        f"Short-term memory, n = {args.n:,} messages, batch = {args.batch}, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
        "",
        "| backend | operation | unit | mnemoscope | AgentScope 1.0.21 | ratio |",
        "|---|---|---|---:|---:|---:|",
    ]
    for backend in args.backends.split(","):
        mine = ours.get(backend, {})
        other = theirs.get(backend, {}) if isinstance(theirs, dict) else {}
        for key, bag in (("failed", mine), ("failed", other)):
            if key in bag:
                who = "mnemoscope" if bag is mine else "AgentScope"
                lines.append(f"| {backend} | {who} failed: {bag[key]} | | | | |")
        for op in OPS + (["commit ceiling"] if backend in SERVER_SQL else []):
            a, b = mine.get(op), other.get(op)
            ratio = f"{a / b:,.1f}x" if a and b else "n/a"
            unit = UNITS.get(op, "msg/s")
            lines.append(f"| {backend} | {op} | {unit} | {_fmt(a)} | {_fmt(b)} | {ratio} |")
    if any(backend in SERVER_SQL for backend in args.backends.split(",")):
        lines += [
            "",
            "commit ceiling: one-row INSERTs in autocommit through the same engine, measured "
            "by each side before and after its single adds (mean). A single-message add is at "
            "least one durable commit, so it bounds add 1/call; the two sides run one after "
            "the other, so compare each side's add rate with its own ceiling.",
        ]
    if isinstance(theirs, str):
        lines += ["", f"AgentScope column empty: {theirs}"]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="messages per session")
    p.add_argument("--batch", type=int, default=100, help="messages per batch add")
    p.add_argument("--singles", type=int, default=2_000, help="max single adds measured")
    p.add_argument("--reads", type=int, default=50, help="max get() calls measured")
    p.add_argument("--budget", type=float, default=8.0, help="seconds per time-boxed step")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    p.add_argument("--sqlite-url", default="")
    p.add_argument("--postgres-url", default="postgresql+asyncpg://postgres@127.0.0.1:5432/test")
    p.add_argument("--mariadb-url", default="mysql+aiomysql://root@127.0.0.1:3306/test")
    p.add_argument(
        "--agentscope-python",
        default=os.environ.get("MNEMOSCOPE_AS1_PYTHON", "/work/side/as1/bin/python"),
    )
    p.add_argument("--side", choices=["both", "mnemoscope", "agentscope"], default="both")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if not args.sqlite_url:
            args.sqlite_url = f"sqlite+aiosqlite:///{tmp}/bench-{args.side}.db"
        if args.side != "both":
            print(json.dumps(asyncio.run(run_side(args.side, args))))
            return
        # one backend at a time, both sides back to back: the machine is shared, and disk
        # and CPU contention drift over minutes
        theirs: dict[str, Any] | str = {}
        ours: dict[str, Any] = {}
        for backend in args.backends.split(","):
            one = argparse.Namespace(**{**vars(args), "backends": backend})
            got = run_agentscope(one)
            if isinstance(got, str):
                theirs = got
            elif isinstance(theirs, dict):
                theirs.update(got)
            ours.update(asyncio.run(run_side("mnemoscope", one)))
    print(table(ours, theirs, args))


if __name__ == "__main__":
    main()
