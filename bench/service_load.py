"""Load on the agent service: K concurrent clients over S sessions, 1 and 2 uvicorn workers,
on Redis and on PostgreSQL (or SQLite: ``--stores sqlite``), against calling ``Agent.reply``
directly in the same run.

Run::

    .venv/bin/python bench/service_load.py                      # the full table (~5 min)
    .venv/bin/python bench/service_load.py --clients 50 --workers 1 --stores redis
    .venv/bin/python bench/service_load.py --clients 50 --rates closed,100,200

Two kinds of load. ``closed`` (the default): each of K clients is a closed loop with no
think time: it posts a message to its session, reads the SSE stream to ``reply_end``, and
posts the next, so K clients offer up to K / latency messages a second (1000/s for 50
clients and 50 ms), more than the direct path itself can do on a small machine: the
latency then measures queueing for the cores. A number (``--rates 100``) is an open loop:
messages arrive at that fixed rate, each to a session of the K that is not answering,
and each latency counts from the arrival, so a slow server is charged for the wait too.
Run the open loop at rates the direct path sustains to see what the service adds at that
load. The load generator is this one process speaking raw HTTP/1.1 on keep-alive
connections (no HTTP library), so it costs the server's cores little.

The agent (this module's ``make_agent``, served with
``mnemoscope serve service_load:make_agent``) has a scripted model that sleeps
``--latency-ms`` (50 ms) per reply and keeps its short-term memory on the same server as
the service's store (``RedisMemory`` / ``AsyncSQLAlchemyMemory`` on PostgreSQL).

The baseline ("direct") is the same work without HTTP: K concurrent tasks in this process,
each building the agent with the same factory and calling ``await agent.reply(...)``.
"added" is the service's latency percentile minus the direct one. The ceiling is what
K clients could do if a reply took exactly the model's latency (K / latency), or the open
loop's rate. "CPU ms/reply" is the CPU time of the server's processes (all workers) per
reply, against the direct path's (this process's) for the same work: the service's own
cost, whatever else runs on the machine.

At the end every session's history is read back through the API: each message sent must
be stored exactly once, followed by its answer ("lost" and "dup" count the exceptions), and
every reply's SSE ids must run 1..n without gaps or repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("MNEMOSCOPE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get(
    "MNEMOSCOPE_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
USERS = 10
TERMINAL = ("reply_end", "reply_failed", "reply_cancelled")

# ----------------------------------------------------------------- the served agent
_SHARED: dict[tuple[int, str], Any] = {}


def _memory(user_id: str, session_id: str) -> Any:
    url = os.environ["MNEMOSCOPE_BENCH_MEMORY_URL"]
    key = (id(asyncio.get_running_loop()), url)
    if url.startswith("redis"):
        import redis.asyncio as redis_asyncio

        from mnemoscope.memory import RedisMemory

        client = _SHARED.get(key) or _SHARED.setdefault(
            key, redis_asyncio.Redis.from_url(url, max_connections=2000)
        )
        return RedisMemory(client, user_id=user_id, session_id=session_id, key_prefix="benchsvc")
    from mnemoscope.memory import AsyncSQLAlchemyMemory

    engine = _SHARED.get(key) or _SHARED.setdefault(
        key, AsyncSQLAlchemyMemory.create_engine(url, pool_size=20)
    )
    return AsyncSQLAlchemyMemory(
        engine, user_id=user_id, session_id=session_id, table_prefix="benchsvc"
    )


async def make_agent(user_id: str, session_id: str) -> Any:
    """The factory served by the workers and called directly by the baseline."""
    from mnemoscope.agent import Agent
    from mnemoscope.testing import ScriptedChatModel

    latency = float(os.environ.get("MNEMOSCOPE_BENCH_LATENCY", "0.05"))

    async def respond(call: Any) -> str:
        await asyncio.sleep(latency)
        return "re: " + call.messages[-1].get_text_content()

    return Agent(
        name="assistant",
        system_prompt="bench",
        model=ScriptedChatModel(default=respond),
        memory=_memory(user_id, session_id),
        max_history_messages=20,
    )


# ------------------------------------------------------------------------ helpers
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Server:
    def __init__(self, store: str, workers: int, tokens: Path, env: dict[str, str]) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable, "-m", "mnemoscope", "serve", "service_load:make_agent",
            "--store", store, "--tokens", str(tokens), "--port", str(self.port),
            "--workers", str(workers), "--busy-policy", "enqueue", "--log-level", "error",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env)

    async def ready(self, http: Any) -> None:
        for _ in range(300):
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited ({self.proc.returncode})")
            try:
                if (await http.get(self.url + "/readyz")).status_code == 200:
                    return
            except Exception:
                pass
            await asyncio.sleep(0.1)
        raise SystemExit("the server did not get ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RawClient:
    """One keep-alive HTTP/1.1 connection speaking just enough HTTP for this bench.

    httpx costs a few milliseconds of CPU a request; on a machine whose cores the server
    shares with the load generator that would be counted as the service's latency."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def reply(self, token: str, sid: str, text: str) -> list[int]:
        """Post one message; the SSE ids of its reply (which must end with reply_end)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        body = json.dumps({"content": text}).encode()
        self.writer.write(
            f"POST /v1/sessions/{sid}/messages HTTP/1.1\r\nHost: bench\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        status = (await self.reader.readline()).split(b" ", 2)[1]
        chunked = False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"transfer-encoding: chunked"):
                chunked = True
        if status != b"200" or not chunked:
            raise RuntimeError(f"HTTP {status.decode()} (chunked={chunked})")
        data = b""
        while True:  # the chunked body, to its last (empty) chunk
            size = int((await self.reader.readline()).strip(), 16)
            chunk = await self.reader.readexactly(size + 2)
            if size == 0:
                break
            data += chunk[:-2]
        ids, kind = [], ""
        for line in data.decode().split("\n"):
            if line.startswith("id: "):
                ids.append(int(line[4:]))
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind in TERMINAL and kind != "reply_end":
                raise RuntimeError(f"reply ended with {kind}: {line[6:300]}")
        if kind != "reply_end":
            raise RuntimeError(f"the reply ended with {kind!r}")
        return ids

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.close()


# --------------------------------------------------------------------- the runs
async def drive(
    clients: int, per_client: int, rate: float | None, one: Any
) -> tuple[list[float], float]:
    """Run ``clients * per_client`` replies with ``await one(i, j)`` (client/session ``i``,
    its ``j``-th message); the latency of each and the wall time.

    Closed loop (``rate`` is None): ``clients`` loops, each sending its next message when
    the last reply ended. Open loop: messages arrive every ``1 / rate`` seconds whatever
    the replies do, each to a session that is not answering (from a pool of ``clients``);
    its latency counts from its arrival, so waiting for a free session is counted too."""
    latencies: list[float] = []
    t0 = time.perf_counter()
    if rate is None:

        async def loop(i: int) -> None:
            for j in range(per_client):
                start = time.perf_counter()
                await one(i, j)
                latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(loop(i) for i in range(clients)))
        return latencies, time.perf_counter() - t0
    free: asyncio.Queue[int] = asyncio.Queue()
    for i in range(clients):
        free.put_nowait(i)
    sent = [0] * clients

    async def arrival(arrived: float) -> None:
        i = await free.get()
        j, sent[i] = sent[i], sent[i] + 1
        try:
            await one(i, j)
        finally:
            free.put_nowait(i)
        latencies.append(time.perf_counter() - arrived)

    tasks = []
    for k in range(clients * per_client):
        arrives = t0 + k / rate
        if (wait := arrives - time.perf_counter()) > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(arrival(arrives)))
    await asyncio.gather(*tasks)
    return latencies, time.perf_counter() - t0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (the uvicorn workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)], stats[int(entry)] = int(fields[1]), fields
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, parent in parents.items() if parent == p and c not in tree]
    return sum(int(stats[p][11]) + int(stats[p][12]) for p in tree if p in stats) / tick


async def run_direct(
    memory_url: str, clients: int, per_client: int, rate: float | None, run: str
) -> dict[str, Any]:
    os.environ["MNEMOSCOPE_BENCH_MEMORY_URL"] = memory_url

    def ids(i: int) -> tuple[str, str]:
        return f"d{run}u{i % USERS}", f"d{run}s{i}"

    async def one(i: int, j: int) -> None:
        agent = await make_agent(*ids(i))
        await agent.reply(f"c{i} m{j}")
        await agent.memory.aclose()

    await one(-1, 0)  # warm-up: connections, tables
    cpu0 = time.process_time()
    latencies, wall = await drive(clients, per_client, rate, one)
    cpu = time.process_time() - cpu0
    # clean up what the baseline stored
    for i in range(-1, clients):
        agent = await make_agent(*ids(i))
        await agent.memory.clear()
        await agent.memory.aclose()
    for value in _SHARED.values():
        await (value.dispose() if hasattr(value, "dispose") else value.aclose())
    _SHARED.clear()
    return {"latencies": latencies, "wall": wall, "cpu": cpu}


async def run_service(
    store: str, memory_url: str, workers: int, clients: int, sessions: int, per_client: int,
    rate: float | None, run: str,
) -> dict[str, Any]:  # fmt: skip
    import httpx

    tmp = Path(tempfile.mkdtemp(prefix="svcbench"))
    tokens = {f"tok-{run}-{u:04d}-xxxxxxxx": f"b{run}u{u}" for u in range(USERS)}
    (tmp / "tokens.json").write_text(json.dumps(tokens))
    token_of = {user: tok for tok, user in tokens.items()}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT / "src")]),
        "MNEMOSCOPE_BENCH_MEMORY_URL": memory_url,
    }
    server = Server(store, workers, tmp / "tokens.json", env)
    async with httpx.AsyncClient(timeout=120) as http:
        raws = [RawClient(server.port) for _ in range(clients)]
        try:
            await server.ready(http)
            owners = {f"b{run}s{s}": f"b{run}u{s % USERS}" for s in range(sessions)}
            for sid, user in owners.items():
                headers = {"Authorization": f"Bearer {token_of[user]}"}
                r = await http.post(
                    server.url + "/v1/sessions", json={"session_id": sid}, headers=headers
                )
                r.raise_for_status()
            gaps = 0
            sent: dict[str, list[str]] = {sid: [] for sid in owners}

            async def one(i: int, j: int, tag: str = "r") -> None:
                nonlocal gaps
                sid = f"b{run}s{i % sessions}"
                text = f"c{i} m{j} {tag}"
                sent[sid].append(text)
                ids = await raws[i].reply(token_of[owners[sid]], sid, text)
                if ids != list(range(1, len(ids) + 1)):
                    gaps += 1

            # warm-up: connections, the first reply of each session
            await asyncio.gather(*(one(i, -1, "w") for i in range(clients)))
            cpu0 = cpu_seconds(server.proc.pid)
            latencies, wall = await drive(clients, per_client, rate, one)
            cpu = cpu_seconds(server.proc.pid) - cpu0
            lost = dup = 0
            for sid, user in owners.items():
                headers = {"Authorization": f"Bearer {token_of[user]}"}
                r = await http.get(f"{server.url}/v1/sessions/{sid}/history", headers=headers)
                texts = [m["msg"]["content"][0]["text"] for m in r.json()["messages"]]
                stored = [t for t in texts if not t.startswith("re: ")]
                answers = {t[4:] for t in texts if t.startswith("re: ")}
                for text in sent[sid]:
                    n = stored.count(text)
                    lost += n == 0 or text not in answers
                    dup += max(0, n - 1)
                await http.delete(f"{server.url}/v1/sessions/{sid}", headers=headers)
        finally:
            for raw in raws:
                await raw.aclose()
            server.stop()
    return {
        "latencies": latencies, "wall": wall, "cpu": cpu, "lost": lost, "dup": dup, "gaps": gaps
    }  # fmt: skip


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _rate(value: str) -> float | None:
    return None if value == "closed" else float(value)


async def main() -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,10,50,200", help="comma-separated K values")
    parser.add_argument("--sessions", type=int, default=0, help="S (default: K, one each)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--stores", default="redis,postgres", help="of redis, postgres, sqlite")
    parser.add_argument(
        "--per-client", type=int, default=None, help="replies per client (default: 10, or 100 / K)"
    )
    parser.add_argument(
        "--rates",
        default="closed",
        help="comma-separated: 'closed' (K closed loops, no think time) or an open-loop "
        "arrival rate in messages/s over a pool of K sessions",
    )
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args()
    os.environ["MNEMOSCOPE_BENCH_LATENCY"] = str(args.latency_ms / 1000)
    files = Path(tempfile.mkdtemp(prefix="svcbench-sqlite"))
    urls = {
        "redis": (REDIS_URL, REDIS_URL),
        "postgres": (POSTGRES_URL, POSTGRES_URL),
        # the store and the agents' memory in two SQLite files of one directory
        "sqlite": (
            f"sqlite:///{files / 'service.db'}",
            f"sqlite+aiosqlite:///{files / 'memory.db'}",
        ),
    }
    rows, raw = [], []
    runs = [
        (store, k, rate)
        for store in args.stores.split(",")
        for k in (int(x) for x in args.clients.split(","))
        for rate in (_rate(x) for x in args.rates.split(","))
    ]
    for store_name, k, rate in runs:
        store, memory_url = urls[store_name]
        sessions = args.sessions or k
        per_client = args.per_client or max(10, 100 // k)  # enough replies for a p95
        run = uuid.uuid4().hex[:6]
        load = f"{k}" if rate is None else f"{k} @ {rate:g}/s"
        ceiling = k / (args.latency_ms / 1000) if rate is None else rate
        direct = await run_direct(memory_url, k, per_client, rate, run)
        n = len(direct["latencies"])
        d50, d95 = _pct(direct["latencies"], 0.5), _pct(direct["latencies"], 0.95)
        rows.append(
            f"| {store_name} | direct | {load} | {k} | {n} | {n / direct['wall']:.0f} "
            f"| {ceiling:.0f} | {_ms(d50)} | {_ms(d95)} | - | - | - | {_ms(direct['cpu'] / n)} |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
        for workers in (int(x) for x in args.workers.split(",")):
            res = await run_service(
                store, memory_url, workers, k, sessions, per_client, rate, run + str(workers)
            )
            n = len(res["latencies"])
            s50, s95 = _pct(res["latencies"], 0.5), _pct(res["latencies"], 0.95)
            rows.append(
                f"| {store_name} | {workers} worker{'s' if workers > 1 else ''} | {load} "
                f"| {sessions} | {n} | {n / res['wall']:.0f} | {ceiling:.0f} "
                f"| {_ms(s50)} | {_ms(s95)} | {_ms(s50 - d50)} | {_ms(s95 - d95)} "
                f"| {res['lost']} / {res['dup']} / {res['gaps']} | {_ms(res['cpu'] / n)} |"
            )
            raw.append(
                {
                    "store": store_name,
                    "workers": workers,
                    "clients": k,
                    "rate": rate,
                    "sessions": sessions,
                    "direct_p50": d50,
                    "direct_p95": d95,
                    "direct_cpu_per_reply": direct["cpu"] / len(direct["latencies"]),
                    "p50": s50,
                    "p95": s95,
                    "server_cpu_per_reply": res["cpu"] / n,
                    "replies_per_s": n / res["wall"],
                    "lost": res["lost"],
                    "dup": res["dup"],
                    "gaps": res["gaps"],
                }
            )
            print(rows[-1], file=sys.stderr, flush=True)
    print(
        f"\nScripted model latency {args.latency_ms:g} ms; "
        f"{args.per_client or 'max(10, 100 / K)'} replies per client; "
        f"load average at the end: {_loadavg()}\n"
    )
    print(
        "| store | run | clients K | sessions S | replies | replies/s | ceiling/s "
        "| p50 ms | p95 ms | added p50 ms | added p95 ms | lost / dup / id gaps "
        "| CPU ms/reply |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return raw


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


if __name__ == "__main__":
    results = asyncio.run(main())
    if len(sys.argv) > 1 and "--json" in sys.argv:
        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(results, indent=2))
