"""Load on the agent service: K concurrent clients over S sessions, 1 and 2 uvicorn workers,
on Redis and on PostgreSQL, against calling ``Agent.reply`` directly in the same run.

Run::

    .venv/bin/python bench/service_load.py                      # the full table (~5 min)
    .venv/bin/python bench/service_load.py --clients 50 --workers 1 --stores redis

Each client is a closed loop: it posts a message to its session, reads the SSE stream to
``reply_end``, and posts the next. The agent (this module's ``make_agent``, served with
``mnemoscope serve service_load:make_agent``) has a scripted model that sleeps
``--latency-ms`` (50 ms) per reply and keeps its short-term memory on the same server as
the service's store (``RedisMemory`` / ``AsyncSQLAlchemyMemory`` on PostgreSQL).

The baseline ("direct") is the same work without HTTP: K concurrent tasks in this process,
each building the agent with the same factory and calling ``await agent.reply(...)``.
"added" is the service's latency percentile minus the direct one. The ceiling is what
K clients could do if a reply took exactly the model's latency (K / latency).

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
async def run_direct(memory_url: str, clients: int, per_client: int, run: str) -> dict[str, Any]:
    os.environ["MNEMOSCOPE_BENCH_MEMORY_URL"] = memory_url
    latencies: list[float] = []

    async def client(i: int) -> None:
        user, sid = f"d{run}u{i % USERS}", f"d{run}s{i}"
        for j in range(per_client):
            t0 = time.perf_counter()
            agent = await make_agent(user, sid)
            await agent.reply(f"c{i} m{j}")
            await agent.memory.aclose()
            latencies.append(time.perf_counter() - t0)

    await client(-1)  # warm-up: connections, tables
    latencies.clear()
    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    # clean up what the baseline stored
    for i in range(-1, clients):
        agent = await make_agent(f"d{run}u{i % USERS}", f"d{run}s{i}")
        await agent.memory.clear()
        await agent.memory.aclose()
    for value in _SHARED.values():
        await (value.dispose() if hasattr(value, "dispose") else value.aclose())
    _SHARED.clear()
    return {"latencies": latencies, "wall": wall}


async def run_service(
    store: str, memory_url: str, workers: int, clients: int, sessions: int, per_client: int,
    run: str,
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
    limits = httpx.Limits(max_connections=clients + 20, max_keepalive_connections=clients + 20)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        try:
            await server.ready(http)
            owners = {f"b{run}s{s}": f"b{run}u{s % USERS}" for s in range(sessions)}
            for sid, user in owners.items():
                headers = {"Authorization": f"Bearer {token_of[user]}"}
                r = await http.post(
                    server.url + "/v1/sessions", json={"session_id": sid}, headers=headers
                )
                r.raise_for_status()
            latencies: list[float] = []
            gaps = 0
            sent: dict[str, list[str]] = {sid: [] for sid in owners}

            async def client(i: int, n: int, record: bool) -> None:
                nonlocal gaps
                sid = f"b{run}s{i % sessions}"
                token = token_of[owners[sid]]
                raw = RawClient(server.port)
                try:
                    for j in range(n):
                        text = f"c{i} m{j} {'w' if not record else 'r'}"
                        sent[sid].append(text)
                        t0 = time.perf_counter()
                        ids = await raw.reply(token, sid, text)
                        if record:
                            latencies.append(time.perf_counter() - t0)
                        if ids != list(range(1, len(ids) + 1)):
                            gaps += 1
                finally:
                    await raw.aclose()

            await asyncio.gather(*(client(i, 1, False) for i in range(min(clients, 20))))
            t0 = time.perf_counter()
            await asyncio.gather(*(client(i, per_client, True) for i in range(clients)))
            wall = time.perf_counter() - t0
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
            server.stop()
    return {"latencies": latencies, "wall": wall, "lost": lost, "dup": dup, "gaps": gaps}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


async def main() -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,10,50,200", help="comma-separated K values")
    parser.add_argument("--sessions", type=int, default=0, help="S (default: K, one each)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--stores", default="redis,postgres")
    parser.add_argument(
        "--per-client", type=int, default=None, help="replies per client (default: 10, or 100 / K)"
    )
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args()
    os.environ["MNEMOSCOPE_BENCH_LATENCY"] = str(args.latency_ms / 1000)
    urls = {"redis": (REDIS_URL, REDIS_URL), "postgres": (POSTGRES_URL, POSTGRES_URL)}
    rows, raw = [], []
    for store_name in args.stores.split(","):
        store, memory_url = urls[store_name]
        for k in (int(x) for x in args.clients.split(",")):
            sessions = args.sessions or k
            per_client = args.per_client or max(10, 100 // k)  # enough replies for a p95
            run = uuid.uuid4().hex[:6]
            direct = await run_direct(memory_url, k, per_client, run)
            d50, d95 = _pct(direct["latencies"], 0.5), _pct(direct["latencies"], 0.95)
            ceiling = k / (args.latency_ms / 1000)
            rows.append(
                f"| {store_name} | direct | {k} | {k} | {len(direct['latencies'])} "
                f"| {len(direct['latencies']) / direct['wall']:.0f} | {ceiling:.0f} "
                f"| {_ms(d50)} | {_ms(d95)} | - | - | - |"
            )
            for workers in (int(x) for x in args.workers.split(",")):
                res = await run_service(
                    store, memory_url, workers, k, sessions, per_client, run + str(workers)
                )
                s50, s95 = _pct(res["latencies"], 0.5), _pct(res["latencies"], 0.95)
                rows.append(
                    f"| {store_name} | {workers} worker{'s' if workers > 1 else ''} | {k} "
                    f"| {sessions} | {len(res['latencies'])} "
                    f"| {len(res['latencies']) / res['wall']:.0f} | {ceiling:.0f} "
                    f"| {_ms(s50)} | {_ms(s95)} | {_ms(s50 - d50)} | {_ms(s95 - d95)} "
                    f"| {res['lost']} / {res['dup']} / {res['gaps']} |"
                )
                raw.append(
                    {
                        "store": store_name,
                        "workers": workers,
                        "clients": k,
                        "sessions": sessions,
                        "direct_p50": d50,
                        "direct_p95": d95,
                        "p50": s50,
                        "p95": s95,
                        "replies_per_s": len(res["latencies"]) / res["wall"],
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
        "| p50 ms | p95 ms | added p50 ms | added p95 ms | lost / dup / id gaps |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
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
