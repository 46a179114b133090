"""Store faults mid-reply, on a private Redis server or PostgreSQL cluster this test starts
and kills: a short outage (a restart) is survived (the reply completes, no event lost or
doubled); a long one is reported to the client as ``reply_failed`` (``store_unavailable``),
never a silent loss. A store that is down answers 503 and ``/readyz`` says so. The
PostgreSQL ``LISTEN`` connection that wakes readers is re-opened after its backend is
terminated."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("redis", reason="the 'redis' extra is not installed")
asyncpg = pytest.importorskip("asyncpg", reason="the 'sql' extra is not installed")

from mnemoscope.service import StoredEvent  # noqa: E402
from mnemoscope.service._store import Acquired  # noqa: E402

from .conftest import ALICE, free_port, parse_sse  # noqa: E402

pytestmark = [pytest.mark.services, pytest.mark.timeout(120)]

FAILED = json.dumps({"type": "reply_failed", "reason": "worker_lost"})


class PrivateRedis:
    """A redis-server of this test only (append-only file, so a restart keeps the data)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.workdir)]
        self.proc = subprocess.Popen(
            ["redis-server", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                import socket

                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("private redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def store(self) -> Any:
        from mnemoscope.service import RedisServiceStore

        return RedisServiceStore(self.url)


class PrivatePostgres:
    """A PostgreSQL cluster of this test only, in a temp dir, on a free port.

    ``initdb`` refuses to run as root: as root every command runs as the ``postgres``
    user (``runuser``)."""

    def __init__(self, bindir: str, root: Path) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [os.path.join(self.bindir, tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise AssertionError(f"{tool} failed: {done.stdout}{done.stderr}")

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "server.log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def kill(self) -> None:
        """Stop at once, as a crash would (``-m immediate``: no shutdown checkpoint)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def store(self) -> Any:
        from mnemoscope.service import PostgresServiceStore

        return PostgresServiceStore(self.url)


def _missing(what: str) -> NoReturn:
    """Skip for want of a server binary, or fail under MNEMOSCOPE_REQUIRE_SERVICES=1 (CI)."""
    if os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
        pytest.fail(what + " (MNEMOSCOPE_REQUIRE_SERVICES=1 forbids skipping)")
    pytest.skip(what)


def _private_pg() -> Iterator[PrivatePostgres]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        _missing("PostgreSQL's server binaries are missing (apt-get install postgresql)")
    root = Path(tempfile.mkdtemp(prefix="mnemoscope-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    server = PrivatePostgres(os.path.dirname(found[-1]), root)
    try:
        server.init()
        server.start()
        yield server
    finally:
        if server.running():
            server.kill()
        shutil.rmtree(root, ignore_errors=True)


def _private_redis(workdir: Path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        _missing("redis-server is not installed (apt-get install redis-server)")
    server = PrivateRedis(workdir)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    yield from _private_pg()


@pytest.fixture(params=["redis", "postgres"])
def private_server(request: Any, tmp_path: Path) -> Iterator[Any]:
    """A private Redis server or PostgreSQL cluster: ``start()``, ``kill()``, ``store()``."""
    if request.param == "redis":
        yield from _private_redis(tmp_path)
    else:
        yield from _private_pg()


async def _running(client: Any, sid: str) -> str:
    for _ in range(300):
        replies = (await client.get(f"/v1/sessions/{sid}/replies", headers=ALICE)).json()
        running = [x["reply_id"] for x in replies if x["status"] == "running"]
        if running:
            return str(running[-1])
        await asyncio.sleep(0.02)
    raise AssertionError("no running reply")


async def test_short_store_outage_mid_reply_is_survived(
    make_client: Any, private_server: Any
) -> None:
    client = await make_client(store=private_server.store(), lock_ttl=8.0, poll_interval=0.2)
    await client.post("/v1/sessions", json={"session_id": "s"}, headers=ALICE)
    post = asyncio.create_task(
        client.post("/v1/sessions/s/messages", json={"content": "slow:1.5 a b c"}, headers=ALICE)
    )
    rid = await _running(client, "s")
    private_server.kill()
    await asyncio.sleep(0.3)
    private_server.start()
    events = parse_sse((await asyncio.wait_for(post, 60)).text)
    assert events[-1]["event"] == "reply_end"
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    stored = parse_sse(
        (await client.get(f"/v1/sessions/s/replies/{rid}/events", headers=ALICE)).text
    )
    assert stored == events
    reply = (await client.get(f"/v1/sessions/s/replies/{rid}", headers=ALICE)).json()
    assert reply["status"] == "done" and reply["last_event_id"] == len(events)
    r = await client.post("/v1/sessions/s/messages", json={"content": "again"}, headers=ALICE)
    assert parse_sse(r.text)[-1]["event"] == "reply_end"


async def test_long_store_outage_mid_reply_is_reported(
    make_client: Any, private_server: Any
) -> None:
    client = await make_client(store=private_server.store(), lock_ttl=1.0, poll_interval=0.1)
    await client.post("/v1/sessions", json={"session_id": "s"}, headers=ALICE)
    post = asyncio.create_task(
        client.post("/v1/sessions/s/messages", json={"content": "slow:0.5 a b"}, headers=ALICE)
    )
    await _running(client, "s")
    private_server.kill()  # and it stays down past the lock's lifetime
    events = parse_sse((await asyncio.wait_for(post, 60)).text)
    assert events[-1]["event"] == "reply_failed"
    assert events[-1]["data"]["reason"] == "store_unavailable"
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert (await client.get("/readyz")).status_code == 503
    r = await client.get("/v1/sessions", headers=ALICE)
    assert r.status_code == 503 and "store is unavailable" in r.json()["detail"]
    # back up: the session is recovered (its reply closed as failed) and answers again
    private_server.start()
    assert (await client.get("/readyz")).status_code == 200
    r = await client.post("/v1/sessions/s/messages", json={"content": "again"}, headers=ALICE)
    assert parse_sse(r.text)[-1]["event"] == "reply_end"
    replies = (await client.get("/v1/sessions/s/replies", headers=ALICE)).json()
    assert [x["status"] for x in replies] == ["failed", "done"]


async def test_unreachable_store_answers_503(make_client: Any) -> None:
    from mnemoscope.service import RedisServiceStore

    client = await make_client(store=RedisServiceStore(f"redis://127.0.0.1:{free_port()}/0"))
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code == 503
    r = await client.post("/v1/sessions", json={"session_id": "s"}, headers=ALICE)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"


async def _until(check: Any, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.05)


async def test_listen_connection_is_reopened_after_its_backend_is_terminated(
    private_pg: PrivatePostgres,
) -> None:
    from mnemoscope.service import PostgresServiceStore

    reader, writer = PostgresServiceStore(private_pg.url), PostgresServiceStore(private_pg.url)
    await reader.open()
    await writer.open()
    admin = await asyncpg.connect(private_pg.url)
    listen_sql = f'LISTEN "{reader.channel}"'
    try:
        await writer.create_session("alice", "s", "")
        got = await writer.acquire("alice", "s", 30, FAILED, "r")
        assert isinstance(got, Acquired)
        pids = "SELECT pid FROM pg_stat_activity WHERE query = $1"
        old = {r["pid"] for r in await admin.fetch(pids, listen_sql)}
        assert len(old) == 2  # one LISTEN connection a store
        for pid in old:
            await admin.execute("SELECT pg_terminate_backend($1)", pid)

        async def relistened() -> bool:
            now = {r["pid"] for r in await admin.fetch(pids, listen_sql)}
            return len(now) == 2 and not now & old

        await _until(relistened, "both LISTEN connections are re-opened")
        assert reader.listening
        # a reader blocked for up to 20 s wakes on the other store's append: the
        # notification reaches it through the new connection (without it the read
        # would return nothing after 20 s)
        read = asyncio.create_task(reader.read_events("alice", "s", "r", 0, wait=20))
        await asyncio.sleep(0.3)
        event = StoredEvent(1, "text_delta", json.dumps({"type": "text_delta"}))
        assert not (await writer.append("alice", "s", "r", got.token, [event])).fenced
        assert await asyncio.wait_for(read, 30) == [event]
    finally:
        await admin.close()
        await reader.aclose()
        await writer.aclose()
