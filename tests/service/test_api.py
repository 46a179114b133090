"""The HTTP API in-process (memory store): sessions, SSE replies, re-attach, cancel,
busy policies, history with marks, health, auth, agent checks, the OpenAPI schema."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")

from pydantic import TypeAdapter

from mnemoscope.errors import UserError
from mnemoscope.service import ServiceEvent

from .conftest import ALICE, parse_sse, svc_factory

EVENT = TypeAdapter(ServiceEvent)


async def _session(client: Any, sid: str = "s1", headers: dict[str, str] = ALICE) -> str:
    r = await client.post("/v1/sessions", json={"session_id": sid}, headers=headers)
    assert r.status_code == 201, r.text
    return sid


async def _running_reply(client: Any, sid: str, headers: dict[str, str] = ALICE) -> str:
    """The id of the session's running reply (waits for it to appear)."""
    for _ in range(200):
        r = await client.get(f"/v1/sessions/{sid}/replies", headers=headers)
        running = [x for x in r.json() if x["status"] == "running"]
        if running:
            return str(running[-1]["reply_id"])
        await asyncio.sleep(0.02)
    raise AssertionError("no reply started")


async def test_session_lifecycle(make_client: Any) -> None:
    client = await make_client()
    r = await client.post(
        "/v1/sessions", json={"session_id": "s1", "title": "first"}, headers=ALICE
    )
    assert r.status_code == 201 and r.json()["title"] == "first"
    assert (
        await client.post("/v1/sessions", json={"session_id": "s1"}, headers=ALICE)
    ).status_code == 409
    r = await client.post("/v1/sessions", headers=ALICE)  # no body: a random id
    assert r.status_code == 201
    generated = r.json()["session_id"]
    ids = [s["session_id"] for s in (await client.get("/v1/sessions", headers=ALICE)).json()]
    assert ids == ["s1", generated]
    assert (await client.get("/v1/sessions/s1", headers=ALICE)).json()["session_id"] == "s1"
    await client.post("/v1/sessions/s1/messages", json={"content": "remember me"}, headers=ALICE)
    assert (await client.delete("/v1/sessions/s1", headers=ALICE)).status_code == 204
    assert (await client.get("/v1/sessions/s1", headers=ALICE)).status_code == 404
    assert (await client.delete("/v1/sessions/s1", headers=ALICE)).status_code == 404
    # the agent's memory went with it: a new session of the same id starts empty
    await _session(client, "s1")
    assert (await client.get("/v1/sessions/s1/history", headers=ALICE)).json()["messages"] == []


async def test_reply_streams_typed_events_with_ids(make_client: Any) -> None:
    client = await make_client()
    await _session(client)
    r = await client.post(
        "/v1/sessions/s1/messages", json={"content": "one two three"}, headers=ALICE
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    rid = r.headers["x-reply-id"]
    assert r.headers["location"] == f"/v1/sessions/s1/replies/{rid}"
    events = parse_sse(r.text)
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["event"] == "reply_start" and events[-1]["event"] == "reply_end"
    for e in events:
        assert EVENT.validate_python(e["data"]).type == e["event"]
    text = "".join(e["data"]["delta"] for e in events if e["event"] == "text_delta")
    assert text == "echo: one two three"
    info = (await client.get(f"/v1/sessions/s1/replies/{rid}", headers=ALICE)).json()
    assert info["status"] == "done" and info["last_event_id"] == len(events)


async def test_reattach_gives_the_events_after_last_event_id_once(make_client: Any) -> None:
    client = await make_client()
    await _session(client)
    r = await client.post(
        "/v1/sessions/s1/messages", json={"content": "a b c d e f"}, headers=ALICE
    )
    full = parse_sse(r.text)
    rid = r.headers["x-reply-id"]
    url = f"/v1/sessions/s1/replies/{rid}/events"
    for k in (0, 1, 3, len(full) - 1, len(full)):
        got = parse_sse((await client.get(url, headers={**ALICE, "Last-Event-ID": str(k)})).text)
        assert got == full[k:]
    assert parse_sse((await client.get(url + "?after=2", headers=ALICE)).text) == full[2:]
    bad = await client.get(url, headers={**ALICE, "Last-Event-ID": "x"})
    assert bad.status_code == 422


async def test_reattach_to_a_running_reply(make_client: Any) -> None:
    client = await make_client()
    await _session(client)
    post = asyncio.create_task(
        client.post("/v1/sessions/s1/messages", json={"content": "slow:0.5 x y"}, headers=ALICE)
    )
    rid = await _running_reply(client, "s1")
    attached = await client.get(
        f"/v1/sessions/s1/replies/{rid}/events", headers={**ALICE, "Last-Event-ID": "1"}
    )
    full = parse_sse((await post).text)
    assert parse_sse(attached.text) == full[1:]
    assert full[-1]["event"] == "reply_end"


async def test_cancel_a_running_reply(make_client: Any) -> None:
    client = await make_client()
    await _session(client)
    post = asyncio.create_task(
        client.post("/v1/sessions/s1/messages", json={"content": "tool:30"}, headers=ALICE)
    )
    rid = await _running_reply(client, "s1")
    r = await client.post(f"/v1/sessions/s1/replies/{rid}/cancel", headers=ALICE)
    assert r.status_code == 202 and r.json()["cancel_requested"]
    events = parse_sse((await asyncio.wait_for(post, 10)).text)
    assert events[-1]["event"] == "reply_cancelled"
    assert events[-1]["data"]["reason"] == "requested"
    info = (await client.get(f"/v1/sessions/s1/replies/{rid}", headers=ALICE)).json()
    assert info["status"] == "cancelled"
    assert (
        await client.post(f"/v1/sessions/s1/replies/{rid}/cancel", headers=ALICE)
    ).status_code == 409
    # the session is free again, and its history has no tool call without its result
    r = await client.post("/v1/sessions/s1/messages", json={"content": "after"}, headers=ALICE)
    assert parse_sse(r.text)[-1]["event"] == "reply_end"
    history = (await client.get("/v1/sessions/s1/history", headers=ALICE)).json()["messages"]
    kinds = [b["type"] for m in history for b in m["msg"]["content"]]
    assert kinds.count("tool_use") == kinds.count("tool_result")


async def _start_running(client: Any, content: str) -> tuple[asyncio.Task[Any], str]:
    """Post ``content`` to session s1 in the background; once its reply runs, return the
    pending post and the reply's id."""
    first = asyncio.create_task(
        client.post("/v1/sessions/s1/messages", json={"content": content}, headers=ALICE)
    )
    return first, await _running_reply(client, "s1")


async def test_busy_session_reject(make_client: Any) -> None:
    client = await make_client(busy_policy="reject")
    await _session(client)
    first, rid = await _start_running(client, "slow:0.5")
    r = await client.post("/v1/sessions/s1/messages", json={"content": "second"}, headers=ALICE)
    assert r.status_code == 409 and r.headers["x-running-reply"] == rid
    assert parse_sse((await first).text)[-1]["event"] == "reply_end"
    history = (await client.get("/v1/sessions/s1/history", headers=ALICE)).json()["messages"]
    assert [m["msg"]["content"][0]["text"] for m in history] == ["slow:0.5", "done slow:0.5"]


async def test_busy_session_enqueue_runs_one_after_the_other(make_client: Any) -> None:
    client = await make_client(busy_policy="enqueue")
    await _session(client)
    first, _ = await _start_running(client, "slow:0.4")
    second = await client.post("/v1/sessions/s1/messages", json={"content": "next"}, headers=ALICE)
    assert parse_sse(second.text)[-1]["event"] == "reply_end"
    assert parse_sse((await first).text)[-1]["event"] == "reply_end"
    history = (await client.get("/v1/sessions/s1/history", headers=ALICE)).json()["messages"]
    texts = [m["msg"]["content"][0]["text"] for m in history]
    assert texts == ["slow:0.4", "done slow:0.4", "next", "echo: next"]
    # the second reply saw the first exchange: one conversation, not two
    replies = (await client.get("/v1/sessions/s1/replies", headers=ALICE)).json()
    assert [x["status"] for x in replies] == ["done", "done"]


async def test_enqueued_messages_run_first_come_first_served(make_client: Any) -> None:
    client = await make_client(busy_policy="enqueue")
    await _session(client)
    first, _ = await _start_running(client, "slow:0.5")
    queued = []
    for n in range(6):  # each starts waiting after the one before
        queued.append(
            asyncio.create_task(
                client.post("/v1/sessions/s1/messages", json={"content": f"m{n}"}, headers=ALICE)
            )
        )
        await asyncio.sleep(0.03)
    for post in [first, *queued]:
        assert parse_sse((await post).text)[-1]["event"] == "reply_end"
    history = (await client.get("/v1/sessions/s1/history", headers=ALICE)).json()["messages"]
    asked = [m["msg"]["content"][0]["text"] for m in history if m["msg"]["role"] == "user"]
    assert asked == ["slow:0.5", "m0", "m1", "m2", "m3", "m4", "m5"]


async def test_busy_session_interrupt_cancels_the_running_reply(make_client: Any) -> None:
    client = await make_client(busy_policy="reject")
    await _session(client)
    first, _ = await _start_running(client, "tool:30")
    second = await client.post(
        "/v1/sessions/s1/messages",
        json={"content": "stop that", "busy_policy": "interrupt"},
        headers=ALICE,
    )
    assert parse_sse(second.text)[-1]["event"] == "reply_end"
    assert parse_sse((await asyncio.wait_for(first, 10)).text)[-1]["event"] == "reply_cancelled"


async def test_history_has_marks(make_client: Any) -> None:
    client = await make_client()
    await _session(client)
    r = await client.post("/v1/sessions/s1/messages", json={"content": "tool:0"}, headers=ALICE)
    types = [e["event"] for e in parse_sse(r.text)]
    assert "tool_use" in types and "tool_result" in types
    history = (await client.get("/v1/sessions/s1/history", headers=ALICE)).json()["messages"]
    marks = [m["marks"] for m in history]
    assert ["tool_result"] in marks
    assert history[-1]["msg"]["content"][0]["text"] == "waited"


async def test_health_and_auth(make_client: Any) -> None:
    client = await make_client()
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).status_code == 200
    for headers in ({}, {"Authorization": "Bearer nope-nope-nope"}, {"Authorization": "Basic x"}):
        r = await client.get("/v1/sessions", headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


async def test_async_auth_function(make_client: Any) -> None:
    async def auth(token: str) -> str | None:
        return "carol" if token == "carol-secret" else None

    client = await make_client(auth=auth)
    h = {"Authorization": "Bearer carol-secret"}
    await _session(client, "c", h)
    assert [s["session_id"] for s in (await client.get("/v1/sessions", headers=h)).json()] == ["c"]


async def test_bad_input_is_422_not_500(make_client: Any) -> None:
    client = await make_client()
    await _session(client)
    assert (
        await client.post("/v1/sessions/s1/messages", json={"content": ""}, headers=ALICE)
    ).status_code == 422
    assert (
        await client.post("/v1/sessions/s1/messages", json={}, headers=ALICE)
    ).status_code == 422
    r = await client.post("/v1/sessions", json={"session_id": "a/b"}, headers=ALICE)
    assert r.status_code == 422
    assert (await client.get("/v1/sessions/" + "x" * 200, headers=ALICE)).status_code == 422


async def test_agent_whose_memory_is_not_the_callers_is_refused(make_client: Any) -> None:
    client = await make_client(factory=svc_factory.make_leaky_agent)
    await _session(client)
    r = await client.post("/v1/sessions/s1/messages", json={"content": "hi"}, headers=ALICE)
    end = parse_sse(r.text)[-1]
    assert end["event"] == "reply_failed" and end["data"]["reason"] == "error"
    assert "user_id=user_id, session_id=session_id" in end["data"]["message"]
    r = await client.get("/v1/sessions/s1/history", headers=ALICE)
    assert r.status_code == 500 and "user_id=user_id" in r.json()["detail"]


async def test_tool_taking_a_user_id_from_the_model_is_refused(make_client: Any) -> None:
    client = await make_client(factory=svc_factory.make_user_id_tool_agent)
    await _session(client)
    r = await client.post("/v1/sessions/s1/messages", json={"content": "hi"}, headers=ALICE)
    end = parse_sse(r.text)[-1]
    assert end["event"] == "reply_failed"
    assert "tool 'read_notes' takes 'user_id' from the model" in end["data"]["message"]


async def test_openapi_schema_describes_routes_and_events(make_client: Any) -> None:
    client = await make_client()
    schema = (await client.get("/openapi.json")).json()
    assert "/v1/sessions/{session_id}/replies/{reply_id}/events" in schema["paths"]
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    kinds = {
        ref["$ref"].rsplit("/", 1)[1]
        for ref in schema["components"]["schemas"]["ServiceEvent"]["oneOf"]
    }
    assert {"ReplyEndEvent", "ReplyFailedEvent", "ReplyCancelledEvent", "ToolUseEvent"} <= kinds


def test_create_app_checks_its_arguments() -> None:
    from mnemoscope.service import create_app

    with pytest.raises(UserError, match="auth= is required"):
        create_app(svc_factory.make_agent)
    with pytest.raises(UserError, match="busy_policy"):
        create_app(svc_factory.make_agent, auth={"t" * 10: "u"}, busy_policy="drop")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="module:function"):
        create_app("no_colon_here", auth={"t" * 10: "u"})
    with pytest.raises(UserError, match="cannot import"):
        create_app("not_a_module_xyz:f", auth={"t" * 10: "u"})
    with pytest.raises(UserError, match="twice poll_interval"):
        create_app(svc_factory.make_agent, auth={"t" * 10: "u"}, lock_ttl=1, poll_interval=1)


async def test_middleware_scoped_to_another_user_is_refused(make_client: Any) -> None:
    client = await make_client(factory=svc_factory.make_wrong_middleware_agent)
    await _session(client)
    r = await client.post("/v1/sessions/s1/messages", json={"content": "hi"}, headers=ALICE)
    end = parse_sse(r.text)[-1]
    assert end["event"] == "reply_failed"
    assert "ScopedMiddleware is scoped to user 'everyone'" in end["data"]["message"]


async def test_heartbeat_racing_the_final_append_is_not_a_lost_reply(
    make_client: Any, redis_url: str, unique_id: str
) -> None:
    """A heartbeat that runs while the reply's end is being stored finds the lock freed by
    that very append: the reply must still end with reply_end, not reply_failed."""
    from mnemoscope.service import RedisServiceStore

    from .conftest import drop_store_data

    store = RedisServiceStore(redis_url, key_prefix=f"svc{unique_id}")
    client = await make_client(store=store, poll_interval=0.002, lock_ttl=1.0)
    await _session(client)
    try:
        ends = []
        for i in range(150):
            r = await client.post(
                "/v1/sessions/s1/messages", json={"content": f"m{i}"}, headers=ALICE
            )
            ends.append(parse_sse(r.text)[-1]["event"])
        assert ends == ["reply_end"] * 150
    finally:
        await drop_store_data(store)
