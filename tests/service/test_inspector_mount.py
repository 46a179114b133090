"""The inspector served by the service's own app (``mnemoscope serve --inspector``).

The agents' short-term memory is a real Redis (``svc_factory`` with
``MNEMOSCOPE_TEST_MEMORY_URL``); the inspector reads the same keys and signs users in with
the service's token check, so a reply sent through the API is on the inspector's page of
its user, and of nobody else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")

from mnemoscope.agent import Agent
from mnemoscope.cli import main
from mnemoscope.cli._serve import INSPECTOR_ENV, inspector_mounts
from mnemoscope.errors import UserError
from mnemoscope.service import create_app
from mnemoscope.testing import ScriptedChatModel
from mnemoscope.tool import Toolkit

from .conftest import ALICE, BOB, TOKENS, parse_sse, svc_factory

pytestmark = pytest.mark.services


async def _drop_keys(redis_url: str, prefix: str) -> None:
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(redis_url)
    try:
        async for key in client.scan_iter(match=f"{prefix}:*"):
            await client.delete(key)
    finally:
        await client.aclose()


async def budgeted_agent(user_id: str, session_id: str) -> Agent:
    """``svc_factory``'s agent with a context budget: it reports a ContextEvent per call."""
    return Agent(
        name="assistant",
        system_prompt="You are a test agent.",
        model=ScriptedChatModel(default=svc_factory.respond, stream=True),
        toolkit=Toolkit([svc_factory.wait]),
        memory=svc_factory.memory_for(user_id, session_id),
        max_context_tokens=4000,
    )


@pytest.fixture
async def served(
    redis_url: str, unique_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """A client on the service app with the inspector mounted, and the inspector app."""
    prefix = f"svctest{unique_id}"
    monkeypatch.setenv("MNEMOSCOPE_TEST_MEMORY_URL", redis_url)
    monkeypatch.setenv("MNEMOSCOPE_TEST_PREFIX", prefix)
    env = {
        INSPECTOR_ENV + "ON": "1",
        INSPECTOR_ENV + "STORE": redis_url,
        INSPECTOR_ENV + "PREFIX": prefix,
        INSPECTOR_ENV + "AUDIT": str(tmp_path / "audit.db"),
    }
    app = create_app(
        budgeted_agent,
        auth=TOKENS,
        poll_interval=0.05,
        lock_ttl=2.0,
        mounts=inspector_mounts(env),
    )
    (inspector,) = [r.app for r in app.routes if getattr(r, "path", "") == "/inspector"]
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
                yield client, inspector
    finally:
        await _drop_keys(redis_url, prefix)


async def _talk(client: httpx.AsyncClient, headers: dict[str, str], sid: str, text: str) -> None:
    assert (
        await client.post("/v1/sessions", json={"session_id": sid}, headers=headers)
    ).status_code == 201
    reply = await client.post(
        f"/v1/sessions/{sid}/messages", json={"content": text}, headers=headers
    )
    assert parse_sse(reply.text)[-1]["event"] == "reply_end"


async def test_a_service_user_sees_only_their_own_sessions_under_inspector(
    served: tuple[httpx.AsyncClient, Any], unique_id: str
) -> None:
    client, _ = served
    mine, theirs = f"a{unique_id}", f"b{unique_id}"
    await _talk(client, ALICE, mine, "hello inspector")
    await _talk(client, BOB, theirs, "bob's secret plan")

    listing = await client.get("/inspector/sessions", headers=ALICE)
    assert listing.status_code == 200 and "signed in as <b>alice</b>" in listing.text
    assert mine in listing.text and theirs not in listing.text
    page = await client.get("/inspector/session", params={"sid": mine}, headers=ALICE)
    assert page.status_code == 200
    assert "hello inspector" in page.text and "echo: hello inspector" in page.text
    assert 'href="/inspector/session/calls?' in page.text  # links stay under the prefix

    refused = await client.get("/inspector/session", params={"sid": mine}, headers=BOB)
    assert refused.status_code == 404 and "hello inspector" not in refused.text
    bobs = await client.get("/inspector/sessions", headers=BOB)
    assert theirs in bobs.text and mine not in bobs.text


async def test_a_request_without_a_valid_service_token_is_refused(
    served: tuple[httpx.AsyncClient, Any], unique_id: str
) -> None:
    client, _ = served
    sid = f"a{unique_id}"
    await _talk(client, ALICE, sid, "hello inspector")
    for headers in ({}, {"Authorization": "Bearer not-a-token-at-all"}):
        for path in ("/inspector/sessions", f"/inspector/session?sid={sid}"):
            r = await client.get(path, headers=headers)
            assert r.status_code == 401 and "Sign in" in r.text, path
            assert "hello inspector" not in r.text
    # the inspector's own sign-in form takes the service's token, cookie scoped to the prefix
    signed = await client.post("/inspector/signin", data={"token": "alice-token-0001"})
    assert signed.status_code == 303 and signed.headers["location"] == "/inspector/sessions"
    assert "path=/inspector" in signed.headers["set-cookie"].lower()
    assert (await client.get("/inspector/sessions")).status_code == 200
    client.cookies.clear()


async def test_the_services_own_routes_still_work(
    served: tuple[httpx.AsyncClient, Any], unique_id: str
) -> None:
    client, inspector = served
    sid = f"a{unique_id}"
    await _talk(client, ALICE, sid, "hello")
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).status_code == 200
    assert [s["session_id"] for s in (await client.get("/v1/sessions", headers=ALICE)).json()] == [
        sid
    ]
    history = (await client.get(f"/v1/sessions/{sid}/history", headers=ALICE)).json()
    assert [m["msg"]["content"][0]["text"] for m in history["messages"]] == ["hello", "echo: hello"]
    assert (await client.get("/v1/sessions")).status_code == 401
    assert "/v1/sessions" in (await client.get("/openapi.json")).json()["paths"]
    assert inspector.state.inspector.owned  # open while the service runs


async def _first_message_id(client: httpx.AsyncClient, sid: str) -> str:
    for _ in range(200):
        history = await client.get(f"/v1/sessions/{sid}/history", headers=ALICE)
        if history.status_code == 200 and history.json()["messages"]:
            return str(history.json()["messages"][0]["msg"]["id"])
        await asyncio.sleep(0.02)
    raise AssertionError(f"the reply of {sid} stored no message")


async def test_model_calls_show_what_the_agent_recorded_in_the_reply_log(
    served: tuple[httpx.AsyncClient, Any], unique_id: str
) -> None:
    client, _ = served
    sid = f"a{unique_id}"
    await _talk(client, ALICE, sid, "tool:0.01")  # a tool call, then the answer: two calls
    mid = await _first_message_id(client, sid)
    page = await client.get(
        "/inspector/session/calls", params={"sid": sid, "msg": mid}, headers=ALICE
    )
    assert page.status_code == 200 and page.text.count('<section class="call"') == 2
    assert page.text.count("<span class=badge>recorded</span>") == 2
    assert "tokens as the agent counted them: system" in page.text
    assert "compacted, offloaded and recalled" not in page.text  # the event says it
    theirs = await client.get(
        "/inspector/session/calls", params={"sid": sid, "msg": mid}, headers=BOB
    )
    assert theirs.status_code == 404


async def test_a_running_reply_is_live_and_recorded_under_inspector(
    served: tuple[httpx.AsyncClient, Any], unique_id: str
) -> None:
    client, _ = served
    sid = f"a{unique_id}"
    assert (
        await client.post("/v1/sessions", json={"session_id": sid}, headers=ALICE)
    ).status_code == 201
    reply = asyncio.create_task(
        client.post(f"/v1/sessions/{sid}/messages", json={"content": "slow:1 hi"}, headers=ALICE)
    )
    mid = await _first_message_id(client, sid)
    url = f"/inspector/session/calls?sid={sid}&msg={mid}"
    for _ in range(100):  # the context event is written right before the model call
        running = (await client.get(url, headers=ALICE)).text
        if "recorded" in running:
            break
        await asyncio.sleep(0.02)
    assert 'data-live="1"' in running and "in progress" in running
    assert "<span class=badge>recorded</span>" in running
    assert parse_sse((await reply).text)[-1]["event"] == "reply_end"
    done = (await client.get(url, headers=ALICE)).text
    assert "data-live" not in done and "in progress" not in done
    assert done.count("<span class=badge>recorded</span>") == 1  # one call, now answered


async def test_the_inspector_is_closed_with_the_service(redis_url: str, tmp_path: Path) -> None:
    env = {INSPECTOR_ENV + "ON": "1", INSPECTOR_ENV + "STORE": redis_url}
    env[INSPECTOR_ENV + "AUDIT"] = str(tmp_path / "audit.db")
    app = create_app(svc_factory.make_agent, auth=TOKENS, mounts=inspector_mounts(env))
    (inspector,) = [r.app for r in app.routes if getattr(r, "path", "") == "/inspector"]
    async with app.router.lifespan_context(app):
        assert inspector.state.inspector.owned
    assert inspector.state.inspector.owned == []  # its stores and audit log were closed


@pytest.mark.parametrize(
    "prefix", ["inspector", "/inspector/", "/v1", "/v1/inspector", "/healthz", "/docs"]
)
def test_a_mount_prefix_that_is_malformed_or_taken_is_refused(prefix: str) -> None:
    built: list[str] = []
    with pytest.raises(UserError, match="mount prefix"):
        create_app(
            svc_factory.make_agent,
            auth=TOKENS,
            mounts={prefix: lambda _mount: built.append(prefix)},
        )
    assert built == []  # refused before anything was built


@pytest.mark.parametrize(
    "args, message",
    [
        (["--inspector-store", "redis://x"], "given without --inspector"),
        (["--inspector"], "needs something to show"),
        (["--inspector", "--inspector-store", "mongodb://x"], "mongodb"),
        (
            [
                *("--store", "redis://127.0.0.1:1/0", "--workers", "2", "--inspector"),
                *("--inspector-mem0", "qdrant", "--inspector-embedding", "hash"),
            ],
            "needs --workers 1",
        ),
    ],
)
def test_serve_inspector_argument_errors(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("a-long-token-1 alice\n")
    assert main(["serve", "svc_factory:make_agent", "--tokens", str(tokens), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mnemoscope serve: error:") and message in err


@pytest.mark.timeout(90)
async def test_serve_inspector_over_uvicorn(
    workers: Any, redis_url: str, unique_id: str, tmp_path: Path
) -> None:
    args = (
        "--inspector",
        "--inspector-store",
        redis_url,
        "--inspector-prefix",
        f"svctest{unique_id}",
        "--inspector-audit",
        str(tmp_path / "audit.db"),
    )
    (server,) = workers("memory://", 1, redis_url, args=args)
    sid = f"u{unique_id}"
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await _talk(client, ALICE, sid, "over real http")
            page = await client.get("/inspector/session", params={"sid": sid}, headers=ALICE)
            assert page.status_code == 200 and "echo: over real http" in page.text
            theirs = await client.get("/inspector/session", params={"sid": sid}, headers=BOB)
            assert theirs.status_code == 404
            assert (await client.get("/inspector/sessions")).status_code == 401
    finally:
        await _drop_keys(redis_url, f"svctest{unique_id}")
