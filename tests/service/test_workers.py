"""Real uvicorn worker processes (``mnemoscope serve``) sharing one Redis or one PostgreSQL:
interleaved requests for the same sessions, the busy policy across processes, replay after
dropped connections, SIGKILL of a worker mid-reply, graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")

from .conftest import ALICE, BOB, parse_sse

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.timeout(120)]

TERMINAL = {"reply_end", "reply_failed", "reply_cancelled"}


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def backend(request: Any, tmp_path: Path) -> dict[str, str]:
    """The store URL and the agents' memory URL on the same server (or in SQLite files of
    one directory)."""
    if request.param == "sqlite":
        return {
            "store": f"sqlite:///{tmp_path / 'service.db'}",
            "memory_url": f"sqlite+aiosqlite:///{tmp_path / 'memory.db'}",
        }
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        return {"store": url, "memory_url": url}
    url = request.getfixturevalue("postgres_url")
    return {"store": url, "memory_url": url}


async def _read(resp: httpx.Response, limit: int | None = None) -> list[dict[str, Any]]:
    """Events from a streaming response, at most ``limit`` (then the caller drops it)."""
    events: list[dict[str, Any]] = []
    frame: dict[str, str] = {}
    if not hasattr(resp, "sse_lines"):  # one line iterator per response, across calls
        resp.sse_lines = resp.aiter_lines()  # type: ignore[attr-defined]
    async for line in resp.sse_lines:  # type: ignore[attr-defined]
        if not line:
            if "data" in frame:
                events.append(
                    {
                        "id": int(frame["id"]),
                        "event": frame["event"],
                        "data": json.loads(frame["data"]),
                    }
                )
                if events[-1]["event"] in TERMINAL or (limit and len(events) >= limit):
                    return events
            frame = {}
        elif not line.startswith(":"):
            k, v = line.split(":", 1)
            frame[k] = v.lstrip(" ")
    return events


async def _post(
    c: httpx.AsyncClient, base: str, sid: str, text: str, **extra: Any
) -> httpx.Response:
    return await c.post(
        f"{base}/v1/sessions/{sid}/messages", json={"content": text, **extra}, headers=ALICE
    )


async def _history(c: httpx.AsyncClient, base: str, sid: str) -> list[str]:
    r = await c.get(f"{base}/v1/sessions/{sid}/history", headers=ALICE)
    assert r.status_code == 200, r.text
    return [b.get("text", b["type"]) for m in r.json()["messages"] for b in m["msg"]["content"]]


async def _create(c: httpx.AsyncClient, base: str, sid: str) -> None:
    r = await c.post(f"{base}/v1/sessions", json={"session_id": sid}, headers=ALICE)
    assert r.status_code == 201, r.text


async def _running(c: httpx.AsyncClient, base: str, sid: str) -> str:
    for _ in range(300):
        r = await c.get(f"{base}/v1/sessions/{sid}/replies", headers=ALICE)
        running = [x["reply_id"] for x in r.json() if x["status"] == "running"]
        if running:
            return str(running[-1])
        await asyncio.sleep(0.02)
    raise AssertionError("no running reply")


async def test_two_workers_serve_interleaved_requests_for_the_same_sessions(
    workers: Any, backend: dict[str, str], unique_id: str
) -> None:
    w = workers(backend["store"], 2, backend["memory_url"])
    sids = [f"s{unique_id}{i}" for i in range(4)]
    async with httpx.AsyncClient(timeout=30) as c:
        for i, sid in enumerate(sids):
            await _create(c, w[i % 2].url, sid)
        rounds = 4

        async def converse(i: int, sid: str) -> None:
            for m in range(rounds):
                base = w[(i + m) % 2].url  # each message of a session to the other worker
                events = parse_sse((await _post(c, base, sid, f"{sid} m{m}")).text)
                assert events[-1]["event"] == "reply_end", events[-1]
                assert events[-1]["data"]["msg"]["content"][0]["text"] == f"echo: {sid} m{m}"

        await asyncio.gather(*(converse(i, sid) for i, sid in enumerate(sids)))
        for sid in sids:
            expected = [t for m in range(rounds) for t in (f"{sid} m{m}", f"echo: {sid} m{m}")]
            assert await _history(c, w[0].url, sid) == expected  # none lost, none twice
            assert await _history(c, w[1].url, sid) == expected
            # and bob, on either worker, sees none of it
            r = await c.get(f"{w[1].url}/v1/sessions/{sid}/history", headers=BOB)
            assert r.status_code == 404

        # the same session, one message to each worker at once: one runs, one is refused
        sid = sids[0]
        posts = [
            asyncio.create_task(_post(c, w[0].url, sid, "tool:60 left")),
            asyncio.create_task(_post(c, w[1].url, sid, "tool:60 right")),
        ]
        done, pending = await asyncio.wait(posts, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1 and len(pending) == 1
        assert done.pop().result().status_code == 409
        # the winner runs on; cancelled through the other worker, it ends cancelled
        rid = await _running(c, w[1].url, sid)
        r = await c.post(f"{w[1].url}/v1/sessions/{sid}/replies/{rid}/cancel", headers=ALICE)
        assert r.status_code == 202
        winner = await asyncio.wait_for(pending.pop(), 30)
        assert winner.status_code == 200
        assert parse_sse(winner.text)[-1]["event"] == "reply_cancelled"
        both = await asyncio.gather(
            _post(c, w[0].url, sid, "slow:0.3 first", busy_policy="enqueue"),
            _post(c, w[1].url, sid, "slow:0.3 second", busy_policy="enqueue"),
        )
        assert [parse_sse(r.text)[-1]["event"] for r in both] == ["reply_end", "reply_end"]
        tail = (await _history(c, w[0].url, sid))[-4:]
        # two whole exchanges, one after the other, never interleaved
        assert tail[0].startswith("slow:0.3") and tail[1] == f"done {tail[0]}"
        assert tail[2].startswith("slow:0.3") and tail[3] == f"done {tail[2]}"
        assert {tail[0], tail[2]} == {"slow:0.3 first", "slow:0.3 second"}
        for sid in sids:
            assert (
                await c.delete(f"{w[1].url}/v1/sessions/{sid}", headers=ALICE)
            ).status_code == 204


async def test_replay_after_dropped_connections_is_exactly_once_in_order(
    workers: Any, backend: dict[str, str], unique_id: str
) -> None:
    w = workers(backend["store"], 2, backend["memory_url"])
    sid = f"r{unique_id}"
    words = " ".join(f"w{i}" for i in range(40))
    async with httpx.AsyncClient(timeout=30) as c:
        await _create(c, w[0].url, sid)
        got: list[dict[str, Any]] = []
        async with c.stream(
            "POST", f"{w[0].url}/v1/sessions/{sid}/messages",
            json={"content": f"slow:0.6 {words}"}, headers=ALICE,
        ) as resp:  # fmt: skip
            rid = resp.headers["x-reply-id"]
            got += await _read(resp, limit=2)
        # the connection is gone; re-attach again and again, alternating workers, dropping
        # each connection after a few events
        hop = 0
        while not got or got[-1]["event"] not in TERMINAL:
            hop += 1
            base = w[hop % 2].url
            headers = {**ALICE, "Last-Event-ID": str(got[-1]["id"])}
            url = f"{base}/v1/sessions/{sid}/replies/{rid}/events"
            async with c.stream("GET", url, headers=headers) as resp:
                got += await _read(resp, limit=1 + hop % 4)
            assert hop < 200
        assert hop > 3
        full = parse_sse(
            (await c.get(f"{w[1].url}/v1/sessions/{sid}/replies/{rid}/events", headers=ALICE)).text
        )
        assert got == full
        assert [e["id"] for e in got] == list(range(1, len(got) + 1))
        text = "".join(e["data"]["delta"] for e in got if e["event"] == "text_delta")
        assert text == f"done slow:0.6 {words}"
        await c.delete(f"{w[0].url}/v1/sessions/{sid}", headers=ALICE)


async def test_sigkill_mid_reply_leaves_the_session_consistent(
    workers: Any, backend: dict[str, str], unique_id: str
) -> None:
    w = workers(backend["store"], 2, backend["memory_url"])
    sid = f"k{unique_id}"
    async with httpx.AsyncClient(timeout=30) as c:
        await _create(c, w[0].url, sid)
        await _post(c, w[0].url, sid, "before")
        seen: list[dict[str, Any]] = []
        async with c.stream(
            "POST", f"{w[0].url}/v1/sessions/{sid}/messages",
            json={"content": "tool:60"}, headers=ALICE,
        ) as resp:  # fmt: skip
            rid = resp.headers["x-reply-id"]
            while not seen or seen[-1]["event"] != "tool_use":
                seen += await _read(resp, limit=1)
            w[0].kill()  # mid tool call
        # the other worker tells a re-attaching client that the reply failed
        url = f"{w[1].url}/v1/sessions/{sid}/replies/{rid}/events"
        r = await c.get(url, headers={**ALICE, "Last-Event-ID": str(seen[-1]["id"])})
        rest = parse_sse(r.text)
        assert [e["event"] for e in rest] == ["reply_failed"]
        assert rest[0]["data"]["reason"] == "worker_lost"
        assert rest[0]["id"] == seen[-1]["id"] + 1
        info = (await c.get(f"{w[1].url}/v1/sessions/{sid}/replies/{rid}", headers=ALICE)).json()
        assert info["status"] == "failed"
        # no tool call without its result was stored; the session takes messages again
        history = await _history(c, w[1].url, sid)
        assert history.count("tool_use") == history.count("tool_result") == 0
        after = parse_sse((await _post(c, w[1].url, sid, "after")).text)
        assert after[-1]["event"] == "reply_end"
        assert (await _history(c, w[1].url, sid))[-2:] == ["after", "echo: after"]
        await c.delete(f"{w[1].url}/v1/sessions/{sid}", headers=ALICE)


async def test_graceful_shutdown_finishes_or_cancels_within_the_deadline(
    workers: Any, redis_url: str, unique_id: str
) -> None:
    (survivor,) = workers(redis_url, 1, redis_url)
    (stopping,) = workers(redis_url, 1, redis_url, SHUTDOWN_DEADLINE="1")
    quick, long = f"q{unique_id}", f"l{unique_id}"
    async with httpx.AsyncClient(timeout=30) as c:
        for sid in (quick, long):
            await _create(c, stopping.url, sid)
        long_post = asyncio.create_task(_post(c, stopping.url, long, "tool:60"))
        long_rid = await _running(c, stopping.url, long)
        quick_post = asyncio.create_task(_post(c, stopping.url, quick, "slow:0.5 quick"))
        await _running(c, stopping.url, quick)
        stopping.terminate()
        quick_events = parse_sse((await asyncio.wait_for(quick_post, 20)).text)
        assert quick_events[-1]["event"] == "reply_end"  # finished within the deadline
        # uvicorn re-raises the SIGTERM it handled once it has shut down
        assert stopping.wait(timeout=30) in (0, -signal.SIGTERM)
        long_post.cancel()
        url = f"{survivor.url}/v1/sessions/{long}/replies/{long_rid}/events"
        end = parse_sse((await c.get(url, headers=ALICE)).text)[-1]
        assert end["event"] == "reply_cancelled" and end["data"]["reason"] == "shutdown"
        # the lock was released, not left to expire: the session answers at once
        r = await _post(c, survivor.url, long, "next")
        assert r.status_code == 200 and parse_sse(r.text)[-1]["event"] == "reply_end"
        history = await _history(c, survivor.url, long)
        assert history.count("tool_use") == history.count("tool_result")
        for sid in (quick, long):
            await c.delete(f"{survivor.url}/v1/sessions/{sid}", headers=ALICE)
