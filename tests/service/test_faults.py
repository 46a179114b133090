"""Store faults mid-reply, on a private Redis server this test starts and kills: a short
outage is survived (the reply completes, no event lost or doubled); a long one is reported
to the client as ``reply_failed`` (``store_unavailable``), never a silent loss. A store
that is down answers 503 and ``/readyz`` says so."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("redis", reason="the 'redis' extra is not installed")

from .conftest import ALICE, free_port, parse_sse

pytestmark = [pytest.mark.services, pytest.mark.timeout(90)]


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


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


async def _running(client: Any, sid: str) -> str:
    for _ in range(300):
        replies = (await client.get(f"/v1/sessions/{sid}/replies", headers=ALICE)).json()
        running = [x["reply_id"] for x in replies if x["status"] == "running"]
        if running:
            return str(running[-1])
        await asyncio.sleep(0.02)
    raise AssertionError("no running reply")


async def test_short_store_outage_mid_reply_is_survived(
    make_client: Any, private_redis: PrivateRedis
) -> None:
    from mnemoscope.service import RedisServiceStore

    client = await make_client(store=RedisServiceStore(private_redis.url), lock_ttl=5.0)
    await client.post("/v1/sessions", json={"session_id": "s"}, headers=ALICE)
    post = asyncio.create_task(
        client.post("/v1/sessions/s/messages", json={"content": "slow:1.0 a b c"}, headers=ALICE)
    )
    rid = await _running(client, "s")
    private_redis.kill()
    await asyncio.sleep(0.3)
    private_redis.start()
    events = parse_sse((await asyncio.wait_for(post, 30)).text)
    assert events[-1]["event"] == "reply_end"
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    stored = parse_sse(
        (await client.get(f"/v1/sessions/s/replies/{rid}/events", headers=ALICE)).text
    )
    assert stored == events


async def test_long_store_outage_mid_reply_is_reported(
    make_client: Any, private_redis: PrivateRedis
) -> None:
    from mnemoscope.service import RedisServiceStore

    client = await make_client(
        store=RedisServiceStore(private_redis.url), lock_ttl=1.0, poll_interval=0.1
    )
    await client.post("/v1/sessions", json={"session_id": "s"}, headers=ALICE)
    post = asyncio.create_task(
        client.post("/v1/sessions/s/messages", json={"content": "slow:0.5 a b"}, headers=ALICE)
    )
    await _running(client, "s")
    private_redis.kill()  # and it stays down past the lock's lifetime
    events = parse_sse((await asyncio.wait_for(post, 30)).text)
    assert events[-1]["event"] == "reply_failed"
    assert events[-1]["data"]["reason"] == "store_unavailable"
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert (await client.get("/readyz")).status_code == 503
    r = await client.get("/v1/sessions", headers=ALICE)
    assert r.status_code == 503 and "store is unavailable" in r.json()["detail"]
    # back up: the session is recovered (its reply closed as failed) and answers again
    private_redis.start()
    assert (await client.get("/readyz")).status_code == 200
    r = await client.post("/v1/sessions/s/messages", json={"content": "again"}, headers=ALICE)
    assert parse_sse(r.text)[-1]["event"] == "reply_end"


async def test_unreachable_store_answers_503(make_client: Any) -> None:
    from mnemoscope.service import RedisServiceStore

    client = await make_client(store=RedisServiceStore(f"redis://127.0.0.1:{free_port()}/0"))
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code == 503
    r = await client.post("/v1/sessions", json={"session_id": "s"}, headers=ALICE)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
