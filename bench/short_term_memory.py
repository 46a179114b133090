"""Short-term memory throughput: mnemoscope beside AgentScope 1.0.21, same run, same servers.

Usage::

    python bench/short_term_memory.py --n 10000
    python bench/short_term_memory.py --n 2000 --backends inmemory,redis,sqlite

For every backend (in memory, Redis, SQLite, PostgreSQL, MariaDB) it measures, on a session
of ``--n`` messages:

* ``add 1/call @0``   single-message ``add`` calls on an empty session (msg/s);
* ``add 1/call @n``   the same once the session holds ``n`` messages (msg/s): equal to the
                      previous row when add cost does not grow with session length;
* ``add batch``       ``add`` of ``--batch`` messages per call (msg/s), the median of
                      three fills of a fresh session;
* ``get all``         ``get()`` of the whole session (calls/s);
* ``get by mark``     ``get(marks="hint")``, 10% of the messages carry the mark (calls/s);
* ``delete half``     one ``delete`` of ``n/2`` ids (msg/s).

* ``commit ceiling``  PostgreSQL and MariaDB only: one-row ``INSERT`` statements in
                      autocommit through the same engine, measured by each side around its
                      single adds (kept for comparison with earlier runs).

Beside each of our rows, a ``ceiling`` column holds what the machine allows for that
operation at that moment, measured in the same run, interleaved with our calls (rounds of
a few calls each, so that both see the same load), and ``of ceiling`` our share of it:

* single adds, PostgreSQL and MariaDB: the commit ceiling, one-row ``INSERT`` statements
  in autocommit on one held driver connection of the same engine (asyncpg prepared
  statement, aiomysql); SQLite: the same on a plain ``sqlite3`` connection to the same
  file (WAL, ``synchronous=NORMAL``). A single-message ``add`` is one durable commit, so
  no add can beat it.
* single adds, Redis: a bare redis-py asyncio loop sending our add script (``EVALSHA``,
  the same keys and a pre-serialised message) on the same client: the server's work is
  the same, so the gap is our client-side cost. A ``bare SET`` row gives the plain
  command's rate for reference.
* ``get all`` / ``get by mark``: decoding the same stored JSON rows alone (fetched once
  beforehand), the faster of ``Msg.model_validate_json`` per row and one
  ``TypeAdapter(list[Msg]).validate_json`` over the joined rows. Reads report the median
  call, and ``of ceiling`` the median ratio of back-to-back pairs (decode, get).

Backends are measured one at a time, AgentScope then mnemoscope back to back, because the
machine's disk and CPU are shared and their load drifts over minutes.

PostgreSQL tables are ``VACUUM ANALYZE``-d after the bulk load, on both sides: autovacuum
would do the same within a minute, and without it the planner picks poor plans for freshly
filled tables, and reads the dead rows of cleared sessions (for both libraries). Single
adds and reads are time-boxed (``--budget`` seconds each), so slow backends report a rate
over fewer calls. The AgentScope side runs in a subprocess with the Python of a side
virtualenv, without our ``PYTHONPATH`` (``--agentscope-python``, env
``MNEMOSCOPE_AS1_PYTHON``, default ``/work/side/as1/bin/python``). Create it with::

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
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

BACKENDS = ["inmemory", "redis", "sqlite", "postgres", "mariadb"]
OPS = ["add 1/call @0", "add 1/call @n", "add batch", "get all", "get by mark", "delete half"]
SERVER_SQL = ("postgres", "mariadb")
UNITS = {"get all": "calls/s", "get by mark": "calls/s"}
TEXT = "The quick brown fox jumps over the lazy dog. " * 4


class Side:
    """What a library needs to provide to be measured (one per library)."""

    name = ""

    def new_msg(self, i: int) -> Any:
        raise NotImplementedError

    async def make(self, backend: str, session: str, cfg: dict[str, Any]) -> Any:
        raise NotImplementedError

    async def add(self, mem: Any, msgs: Any, marks: str | None = None) -> None:
        raise NotImplementedError

    async def get_all(self, mem: Any) -> list[Any]:
        raise NotImplementedError

    async def get_mark(self, mem: Any, mark: str) -> list[Any]:
        raise NotImplementedError

    async def delete(self, mem: Any, ids: list[str]) -> None:
        raise NotImplementedError

    async def size(self, mem: Any) -> int:
        raise NotImplementedError

    async def finish(self, mem: Any) -> None:
        raise NotImplementedError

    _engines: dict[str, Any]

    async def analyze(self, backend: str) -> None:
        """PostgreSQL: vacuum and refresh planner statistics after the bulk load (the
        steady state autovacuum reaches within a minute): without it the dead rows of the
        sessions cleared before (earlier fills, earlier runs) stay in the heap, and a
        table whose statistics hold one session is read by a sequential scan of them all."""
        if backend == "postgres":
            from sqlalchemy import text

            async with self._engines[backend].connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(text("VACUUM ANALYZE"))


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

        kw: dict[str, Any] = {"user_id": "bench", "session_id": session}
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


async def _interleaved(
    calls: int,
    budget: float,
    ours: Callable[[int], Any],
    ceiling: Callable[[int], Any] | None,
    *,
    rounds_of: int = 10,
) -> tuple[float, float | None]:
    """Rates (per second) of ``ours`` and ``ceiling``, run in alternating rounds of
    ``rounds_of`` calls until ``calls`` of ours or ``budget`` seconds: the machine's load
    drifts, and both must see the same."""
    if ceiling is None:
        count, secs = await _timed(calls, budget, ours)
        return count / secs, None
    spent = {"ours": 0.0, "ceiling": 0.0}
    done = {"ours": 0, "ceiling": 0}
    start = time.perf_counter()
    while done["ours"] < calls and time.perf_counter() - start < budget:
        for name, step in (("ceiling", ceiling), ("ours", ours)):
            t = time.perf_counter()
            for _ in range(rounds_of):
                await step(done[name])
                done[name] += 1
            spent[name] += time.perf_counter() - t
    return done["ours"] / spent["ours"], done["ceiling"] / spent["ceiling"]


async def _paired(
    calls: int, budget: float, ours: Callable[[], Any], ceiling: Callable[[], Any] | None
) -> tuple[float, float | None, float | None]:
    """``(our calls/s, ceiling calls/s, our share of the ceiling)``, from calls of ``ours``
    and ``ceiling`` alternated: rates of the median call, and the median of the per-pair
    ratios (the two calls of a pair run back to back, under the same load)."""
    mine: list[float] = []
    theirs: list[float] = []
    start = time.perf_counter()
    while len(mine) < calls and (len(mine) < 5 or time.perf_counter() - start < budget):
        t = time.perf_counter()
        await ours()
        mine.append(time.perf_counter() - t)
        if ceiling is not None:
            t = time.perf_counter()
            await ceiling()
            theirs.append(time.perf_counter() - t)
    rate = 1 / statistics.median(mine)
    if not theirs:
        return rate, None, None
    share = statistics.median(c / m for m, c in zip(mine, theirs, strict=True))
    return rate, 1 / statistics.median(theirs), share


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


class _Ceiling:
    """The physical limit of a single add on one backend: ``step(i)`` does one unit of it.

    Built per backend by :meth:`open`; :meth:`close` drops what it created.
    """

    def __init__(self) -> None:
        self.step: Callable[[int], Any] | None = None
        self._close: list[Callable[[], Any]] = []

    async def open(self, side: Side, backend: str, mem: Any, cfg: dict[str, Any]) -> None:
        table = f"bench_ceiling_{uuid.uuid4().hex[:8]}"
        if backend in SERVER_SQL:
            engine = side._engines[backend]
            raw = await engine.raw_connection()
            conn = raw.driver_connection
            if backend == "postgres":
                await conn.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v TEXT)")
                insert = await conn.prepare(f"INSERT INTO {table} (id, v) VALUES ($1, $2)")
                self.step = lambda i: insert.fetch(i, TEXT)

                async def drop() -> None:
                    await conn.execute(f"DROP TABLE {table}")
                    await _release(raw)

            else:
                await conn.autocommit(True)
                cur = await conn.cursor()
                await cur.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v TEXT)")
                sql = f"INSERT INTO {table} (id, v) VALUES (%s, %s)"
                self.step = lambda i: cur.execute(sql, (i, TEXT))

                async def drop() -> None:
                    await cur.execute(f"DROP TABLE {table}")
                    await cur.close()
                    await conn.autocommit(False)
                    await _release(raw)

            self._close.append(drop)
        elif backend == "sqlite":
            import sqlite3

            path = cfg["sqlite_url"].split(":///", 1)[1]
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, v TEXT)")
            pool = ThreadPoolExecutor(1)  # a thread, as our store and aiosqlite use
            sql = f"INSERT INTO {table} (id, v) VALUES (?, ?)"

            def insert_one(i: int) -> Any:
                return asyncio.get_running_loop().run_in_executor(pool, db.execute, sql, (i, TEXT))

            self.step = insert_one

            async def drop_sqlite() -> None:
                db.execute(f"DROP TABLE {table}")
                db.close()
                pool.shutdown()

            self._close.append(drop_sqlite)
        elif backend == "redis" and side.name == "mnemoscope":
            from mnemoscope.memory._redis_lua import _LUA_ADD

            client = mem.client
            sha = await client.script_load(_LUA_ADD)
            keys = [mem.key(k) for k in ("msgs", "order", "seq", "marks", "marknames")]
            head = [mem.key("mark:"), "0", "ignore"]
            # fresh ids, serialised beforehand: the loop does nothing but send the script
            docs = [side.new_msg(i) for i in range(2 * int(cfg["singles"]) + 100)]
            payload = iter([(m.id, m.model_dump_json()) for m in docs])

            def evalsha(_: int) -> Any:
                msg_id, data = next(payload)
                return client.evalsha(sha, len(keys), *keys, *head, msg_id, data, "")

            self.step = evalsha

    async def close(self) -> None:
        for fn in self._close:
            await fn()


async def _release(raw: Any) -> None:
    from sqlalchemy.util import greenlet_spawn

    await greenlet_spawn(raw.close)


async def _stored_json(side: Side, backend: str, mem: Any, mark: str | None) -> list[Any]:
    """The session's stored JSON documents, in order (optionally those carrying ``mark``)."""
    if backend == "redis":
        ids = await mem.client.zrange(mem.key(f"mark:{mark}" if mark else "order"), 0, -1)
        return list(await mem.client.hmget(mem.key("msgs"), ids))
    from sqlalchemy import select

    t, k = mem.messages, mem.marks
    stmt = select(t.c.msg_json).where(t.c.user_id == mem.user_id, t.c.session_id == mem.session_id)
    if mark:
        wanted = select(k.c.seq).where(
            k.c.user_id == mem.user_id, k.c.session_id == mem.session_id, k.c.mark == mark
        )
        stmt = stmt.where(t.c.seq.in_(wanted))
    async with mem.engine.connect() as conn:
        return [r[0] for r in await conn.execute(stmt.order_by(t.c.seq))]


def _decoder(rows: list[Any]) -> Callable[[], Any]:
    """Decoding ``rows`` alone: the faster (best of three each) of one
    ``Msg.model_validate_json`` per row and one ``TypeAdapter(list[Msg])`` call over them
    joined into a JSON array."""
    from pydantic import TypeAdapter

    from mnemoscope.message import Msg

    adapter = TypeAdapter(list[Msg])
    binary = bool(rows) and isinstance(rows[0], bytes)

    def per_row() -> Any:
        return [Msg.model_validate_json(r) for r in rows]

    def joined() -> Any:
        if binary:
            return adapter.validate_json(b"[" + b",".join(rows) + b"]")
        return adapter.validate_json("[" + ",".join(rows) + "]")

    def cost(fn: Callable[[], Any]) -> float:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
        return best

    fastest = per_row if cost(per_row) < cost(joined) else joined

    async def decode() -> Any:
        return fastest()

    return decode


async def measure(side: Side, backend: str, args: argparse.Namespace) -> dict[str, float]:
    cfg = vars(args)
    n, batch, budget = args.n, args.batch, args.budget
    singles = min(n, args.singles)
    res: dict[str, float] = {}
    tag = uuid.uuid4().hex[:8]
    ours = side.name == "mnemoscope"

    # single adds on an empty session, interleaved with the backend's ceiling
    mem = await side.make(backend, f"start-{tag}", cfg)
    ceilings = []
    if backend in SERVER_SQL:  # the disk's state while this side runs
        ceilings.append(await commit_ceiling(side._engines[backend], budget / 4))
    ceiling = _Ceiling()
    if ours:
        await side.size(mem)  # connects (the engine knows its server) and creates the tables
    await ceiling.open(side, backend, mem, cfg)
    msgs = [side.new_msg(i) for i in range(singles)]
    rate, top = await _interleaved(singles, budget, lambda i: side.add(mem, msgs[i]), ceiling.step)
    res["add 1/call @0"] = rate
    if top:
        res["ceiling:add 1/call @0"] = top
    if backend == "redis" and ours:
        client, key = mem.client, f"bench:set:{tag}"
        done, secs = await _timed(singles, budget / 4, lambda i: client.set(key, TEXT))
        res["bare SET"] = done / secs
        await client.delete(key)
    await side.finish(mem)

    # batch adds up to n messages, 10% of them (every 10th batch) marked "hint": the median
    # of three fills of fresh sessions (one fill of a small session is a few dozen calls,
    # which one scheduler hiccup on a shared machine can halve); the last one stays
    fills = []
    for k in range(3):
        if k:
            await side.finish(mem)
        mem = await side.make(backend, f"full-{tag}-{k}", cfg)
        msgs = [side.new_msg(i) for i in range(n)]
        start = time.perf_counter()
        for b, i in enumerate(range(0, n, batch)):
            await side.add(mem, msgs[i : i + batch], "hint" if b % 10 == 0 else None)
        fills.append(n / (time.perf_counter() - start))
    res["add batch"] = statistics.median(fills)
    await side.analyze(backend)

    # single adds once the session holds n messages (then removed again)
    extra = [side.new_msg(n + i) for i in range(singles)]
    step = ceiling.step and _shifted(ceiling.step)
    rate, top = await _interleaved(singles, budget, lambda i: side.add(mem, extra[i]), step)
    res["add 1/call @n"] = rate
    if top:
        res["ceiling:add 1/call @n"] = top
    await ceiling.close()
    if backend in SERVER_SQL:
        ceilings.append(await commit_ceiling(side._engines[backend], budget / 4))
        res["commit ceiling"] = sum(ceilings) / len(ceilings)
    stored = {m.id for m in await side.get_all(mem)}
    await side.delete(mem, [m.id for m in extra if m.id in stored])

    reads = args.reads
    for op, mark in (("get all", None), ("get by mark", "hint")):
        decode = None
        if ours and backend != "inmemory":
            decode = _decoder(await _stored_json(side, backend, mem, mark))
        read = (lambda: side.get_all(mem)) if mark is None else (lambda: side.get_mark(mem, "hint"))
        rate, top, share = await _paired(reads, budget, read, decode)
        res[op] = rate
        if top and share:
            res[f"ceiling:{op}"], res[f"share:{op}"] = top, share

    half = [m.id for m in msgs[::2]]
    start = time.perf_counter()
    await side.delete(mem, half)
    res["delete half"] = len(half) / (time.perf_counter() - start)
    remaining = await side.size(mem)
    if remaining != n - len(half):
        res["error"] = float(remaining)  # reported, not asserted
    await side.finish(mem)
    return res


def _shifted(step: Callable[[int], Any]) -> Callable[[int], Any]:
    """The ceiling's second run continues its ids (primary keys stay unique)."""
    return lambda i: step(i + 1_000_000)


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
    # its own virtualenv as installed: none of our PYTHONPATH (e.g. a parser added there)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False, env=env)
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


CEILING_NAMES = {
    "postgres": "commit",
    "mariadb": "commit",
    "sqlite": "commit",
    "redis": "bare EVALSHA",
}


def table(ours: dict[str, Any], theirs: dict[str, Any] | str, args: argparse.Namespace) -> str:
    lines = [
        f"Short-term memory, n = {args.n:,} messages, batch = {args.batch}, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
        "",
        "| backend | operation | unit | mnemoscope | ceiling | of ceiling "
        "| AgentScope 1.0.21 | ratio |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for backend in args.backends.split(","):
        mine = ours.get(backend, {})
        other = theirs.get(backend, {}) if isinstance(theirs, dict) else {}
        for key, bag in (("failed", mine), ("failed", other)):
            if key in bag:
                who = "mnemoscope" if bag is mine else "AgentScope"
                lines.append(f"| {backend} | {who} failed: {bag[key]} | | | | | | |")
        extra = ["commit ceiling"] if backend in SERVER_SQL else []
        extra += ["bare SET"] if "bare SET" in mine else []
        for op in OPS + extra:
            a, b = mine.get(op), other.get(op)
            ratio = f"{a / b:,.1f}x" if a and b else "n/a"
            unit = UNITS.get(op, "msg/s")
            top = mine.get(f"ceiling:{op}")
            kind = "JSON decode" if op.startswith("get") else CEILING_NAMES.get(backend, "")
            ceiling = f"{_fmt(top)} ({kind})" if top else ""
            fraction = mine.get(f"share:{op}") or (a / top if a and top else None)
            share = f"{fraction:.0%}" if fraction else ""
            lines.append(
                f"| {backend} | {op} | {unit} | {_fmt(a)} | {ceiling} | {share} "
                f"| {_fmt(b)} | {ratio} |"
            )
    lines += [
        "",
        "ceiling: what the machine allows for the operation, measured in the same run in "
        "rounds alternating with our calls (commit: one-row autocommit INSERTs on a held "
        "driver connection of the same engine, or a plain sqlite3 connection to the same "
        "file; bare EVALSHA: redis-py sending our add script with pre-serialised messages "
        "on the same client; JSON decode: the same stored rows decoded alone, the faster "
        "of per-row and one joined array). of ceiling = mnemoscope / ceiling; for reads, "
        "the median ratio of back-to-back pairs (one decode, one get).",
    ]
    if any(backend in SERVER_SQL for backend in args.backends.split(",")):
        lines += [
            "",
            "commit ceiling row: one-row INSERTs in autocommit through SQLAlchemy on the same "
            "engine, measured by each side before and after its single adds (mean); the two "
            "sides run one after the other, so compare each side's add rate with its own.",
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
