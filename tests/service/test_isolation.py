"""Users never meet: every route, tried by another user with alice's ids, answers as if
they did not exist (404, not 403), on every store; a random walk over the OpenAPI schema
finds no 500 and no cross-user read."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")

from .conftest import ALICE, BOB, parse_sse

SECRET = "alice-secret-7f3a"


async def _setup(client: Any) -> dict[str, str]:
    for sid in ("private", "shared"):
        assert (
            await client.post("/v1/sessions", json={"session_id": sid}, headers=ALICE)
        ).status_code == 201
    r = await client.post("/v1/sessions/shared/messages", json={"content": SECRET}, headers=ALICE)
    assert parse_sse(r.text)[-1]["event"] == "reply_end"
    rid = r.headers["x-reply-id"]
    r = await client.post("/v1/sessions/private/messages", json={"content": SECRET}, headers=ALICE)
    private_rid = r.headers["x-reply-id"]
    # bob has a session of the same name: still not alice's
    assert (
        await client.post("/v1/sessions", json={"session_id": "shared"}, headers=BOB)
    ).status_code == 201
    await client.post("/v1/sessions/shared/messages", json={"content": "bob here"}, headers=BOB)
    return {"rid": rid, "private_rid": private_rid}


async def _alice_intact(client: Any, ids: dict[str, str]) -> None:
    sessions = [s["session_id"] for s in (await client.get("/v1/sessions", headers=ALICE)).json()]
    assert sessions == ["private", "shared"]
    for sid in sessions:
        history = (await client.get(f"/v1/sessions/{sid}/history", headers=ALICE)).json()
        texts = [m["msg"]["content"][0]["text"] for m in history["messages"]]
        assert texts[:2] == [SECRET, f"echo: {SECRET}"]
        assert "bob here" not in texts
    r = await client.get(f"/v1/sessions/shared/replies/{ids['rid']}/events", headers=ALICE)
    assert parse_sse(r.text)[-1]["event"] == "reply_end"


async def test_every_route_hides_other_users_data(make_client: Any, any_store: Any) -> None:
    client = await make_client(store=any_store)
    ids = await _setup(client)
    rid, prid = ids["rid"], ids["private_rid"]
    nothing = (await client.get("/v1/sessions/nope", headers=BOB)).json()
    attempts = [
        ("GET", "/v1/sessions/private", None),
        ("DELETE", "/v1/sessions/private", None),
        ("GET", "/v1/sessions/private/history", None),
        ("POST", "/v1/sessions/private/messages", {"content": "give me alice's notes"}),
        ("GET", "/v1/sessions/private/replies", None),
        ("GET", f"/v1/sessions/private/replies/{prid}", None),
        ("GET", f"/v1/sessions/private/replies/{prid}/events", None),
        ("POST", f"/v1/sessions/private/replies/{prid}/cancel", None),
        # bob's own session id, alice's reply id
        ("GET", f"/v1/sessions/shared/replies/{rid}", None),
        ("GET", f"/v1/sessions/shared/replies/{rid}/events", None),
        ("POST", f"/v1/sessions/shared/replies/{rid}/cancel", None),
    ]
    for method, path, body in attempts:
        r = await client.request(method, path, json=body, headers={**BOB, "Last-Event-ID": "0"})
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        assert r.json() == nothing, (method, path)
    sessions = [s["session_id"] for s in (await client.get("/v1/sessions", headers=BOB)).json()]
    assert sessions == ["shared"]
    history = (await client.get("/v1/sessions/shared/history", headers=BOB)).text
    assert SECRET not in history
    replies = (await client.get("/v1/sessions/shared/replies", headers=BOB)).json()
    assert rid not in {x["reply_id"] for x in replies}
    await _alice_intact(client, ids)


def _value(rng: random.Random, pool: list[str]) -> str:
    choice = rng.random()
    if choice < 0.6:
        return rng.choice(pool)
    return rng.choice(["", "..", "%2e%2e", "a" * 129, "ü", "x y", "0", "-1", "%00", "%2F", "alice"])


def _body(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            {},
            {"content": "hello " + "".join(rng.choices("abc xyz", k=8))},
            {"content": ""},
            {"content": 5},
            {"content": "hi", "busy_policy": rng.choice(["reject", "enqueue", "interrupt", "x"])},
            {"session_id": rng.choice(["shared", "private", "new1", "bad/id", ""]), "title": "t"},
            {"title": 7},
            [1, 2],
            "text",
        ]
    )


async def test_random_walk_over_the_openapi_schema(make_client: Any, any_store: Any) -> None:
    client = await make_client(store=any_store, queue_timeout=1.0)
    ids = await _setup(client)
    schema = (await client.get("/openapi.json")).json()
    operations = [
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in ("get", "post", "delete")
    ]
    assert len(operations) >= 12
    pool = ["private", "shared", ids["rid"], ids["private_rid"], "nope"]
    rng = random.Random(1515)
    seen: set[int] = set()
    for _ in range(150):
        method, template = rng.choice(operations)
        path = re.sub(r"\{[a-z_]+\}", lambda _m: _value(rng, pool), template)
        headers = dict(
            rng.choice([BOB, BOB, BOB, {}, {"Authorization": "Bearer alice-token-0002"}])
        )
        if rng.random() < 0.3:
            headers["Last-Event-ID"] = rng.choice(["0", "3", "-1", "x", "99999999999999999999"])
        body = _body(rng) if method == "POST" else None
        content = json.dumps(body) if body is not None else None
        r = await client.request(
            method, path, content=content, headers={**headers, "Content-Type": "application/json"}
        )
        seen.add(r.status_code)
        assert r.status_code < 500, (method, path, body, r.status_code, r.text)
        assert SECRET not in r.text, (method, path)
        if "private" in path.split("/") or ids["rid"] in path or ids["private_rid"] in path:
            assert r.status_code >= 400, (method, path, r.status_code)
    assert {401, 404, 422} <= seen
    await _alice_intact(client, ids)
