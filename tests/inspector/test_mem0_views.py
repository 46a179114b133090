"""The long-term memory pages over mem0: the real ``mem0ai`` package, a local Qdrant path,
the offline hash embedder, and no LLM (memories are stored with ``infer=False``)."""

from __future__ import annotations

import argparse
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the 'inspector' extra (starlette) is not installed")

# imported before mem0: it turns mem0's telemetry off (no network in tests)
from mnemoscope.memory import Mem0LongTermMemory

pytest.importorskip("mem0", reason="the 'mem0' extra (mem0ai) is not installed")

from mnemoscope.cli._inspect import add_inspect_parser, build_app
from mnemoscope.errors import UserError
from mnemoscope.inspector import AuditLog, create_inspector_app
from mnemoscope.testing import HashEmbeddingModel, ScriptedChatModel

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}


@pytest.fixture
def qdrant(tmp_path: Path) -> str:
    return str(tmp_path / "qdrant")


@pytest.fixture
async def store(qdrant: str) -> AsyncIterator[Any]:
    mem = Mem0LongTermMemory(
        chat_model=ScriptedChatModel(), embedding_model=HashEmbeddingModel(), path=qdrant
    )
    yield mem
    await mem.aclose()


@pytest.fixture
async def ids(store: Any) -> dict[str, str]:
    tea = await store.record("Alice prefers green tea.", user_id="alice", infer=False)
    bees = await store.record("Bob keeps bees on his roof.", user_id="bob", infer=False)
    return {"alice": tea.added[0].id, "bob": bees.added[0].id}


@pytest.fixture
async def client(store: Any, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    audit = AuditLog(tmp_path / "audit.db")
    app = create_inspector_app(auth=TOKENS, mem0=store, audit=audit)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inspector") as c:
        yield c
    await app.state.inspector.aclose()
    await audit.aclose()


async def test_the_list_and_search_show_only_the_users_own_mem0_memories(
    client: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    page = await client.get("/memory", headers=ALICE)
    assert page.status_code == 200 and "<span class=badge>mem0</span>" in page.text
    assert "Alice prefers green tea." in page.text and "bees" not in page.text
    assert f'data-memory="{ids["alice"]}"' in page.text
    found = await client.get("/memory", params={"q": "green tea"}, headers=ALICE)
    assert "1 memories match" in found.text and "Alice prefers green tea." in found.text
    theirs = await client.get("/memory", params={"q": "green tea"}, headers=BOB)
    assert "Alice prefers" not in theirs.text
    assert "bees" in (await client.get("/memory", headers=BOB)).text


async def test_an_edit_goes_into_mem0_its_history_and_the_audit_log(
    client: httpx.AsyncClient, store: Any, ids: dict[str, str]
) -> None:
    mid = ids["alice"]
    r = await client.post(
        "/memory/item/edit", data={"id": mid, "content": "Alice prefers oolong."}, headers=ALICE
    )
    assert r.status_code == 303 and r.headers["location"] == f"/memory/item?id={mid}"
    assert (await store.client.get(mid))["memory"] == "Alice prefers oolong."
    found = await store.retrieve("oolong", user_id="alice")
    assert [i.id for i in found] == [mid]  # re-embedded: the new text is what is found

    page = (await client.get("/memory/item", params={"id": mid}, headers=ALICE)).text
    assert '<div class="text" id="content">Alice prefers oolong.</div>' in page
    history = page.split('<table class="history">')[1].split("</table>")[0]
    events = re.findall(r"<span class=\"badge[^\"]*\">(\w+)</span>", history)
    assert events == ["add", "update"]
    # the update row: what it said before, and what superseded it
    assert "Alice prefers green tea." in history and "Alice prefers oolong." in history
    audit = page.split('<table class="audit">')[1]
    assert "alice" in audit and "ltm.update" in audit and "UTC" in audit


async def test_a_delete_removes_the_memory_and_keeps_its_history_for_its_owner(
    client: httpx.AsyncClient, store: Any, ids: dict[str, str]
) -> None:
    mid = ids["alice"]
    r = await client.post("/memory/item/delete", data={"id": mid}, headers=ALICE)
    assert r.status_code == 303
    assert await store.client.get(mid) is None
    page = await client.get("/memory/item", params={"id": mid}, headers=ALICE)
    assert page.status_code == 200 and "This memory was deleted" in page.text
    assert "ltm.delete" in page.text and "Alice prefers green tea." in page.text
    # mem0's own history of the deleted memory, not just the audit log's copy of its text
    history = page.text.split('<table class="history">')[1].split("</table>")[0]
    assert re.findall(r"<span class=\"badge[^\"]*\">(\w+)</span>", history) == ["add", "delete"]
    assert "Alice prefers green tea." in history
    # mem0 keeps no owner for a deleted memory: only the user who deleted it sees it
    theirs = await client.get("/memory/item", params={"id": mid}, headers=BOB)
    assert theirs.status_code == 404 and "green tea" not in theirs.text
    again = await client.post("/memory/item/delete", data={"id": mid}, headers=ALICE)
    assert again.status_code == 404


async def test_another_user_can_neither_read_nor_change_a_mem0_memory(
    client: httpx.AsyncClient, store: Any, ids: dict[str, str]
) -> None:
    mid = ids["alice"]
    for method, path, data in (
        ("GET", f"/memory/item?id={mid}", None),
        ("POST", "/memory/item/edit", {"id": mid, "content": "hacked"}),
        ("POST", "/memory/item/delete", {"id": mid}),
    ):
        r = await client.request(method, path, data=data, headers=BOB)
        assert r.status_code == 404 and "green tea" not in r.text, path
    assert (await store.client.get(mid))["memory"] == "Alice prefers green tea."
    assert (await store.client.history(mid))[-1]["event"] == "ADD"
    for bad in ("not-a-uuid", "", "../../etc"):
        assert (
            await client.get("/memory/item", params={"id": bad}, headers=ALICE)
        ).status_code == 404


async def test_an_empty_edit_is_refused_and_nothing_is_written(
    client: httpx.AsyncClient, store: Any, ids: dict[str, str]
) -> None:
    mid = ids["alice"]
    r = await client.post("/memory/item/edit", data={"id": mid, "content": "  "}, headers=ALICE)
    assert r.status_code == 409 and "non-empty" in r.text
    assert (await store.client.get(mid))["memory"] == "Alice prefers green tea."
    assert "ltm.update" not in (await client.get("/audit", headers=ALICE)).text


def test_mem0_and_ltm_together_are_refused(qdrant: str, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not both"):
        create_inspector_app(auth=TOKENS, ltm=str(tmp_path / "ltm.db"), mem0=qdrant)
    with pytest.raises(UserError, match="needs embedding_model="):
        create_inspector_app(auth=TOKENS, mem0=qdrant)
    with pytest.raises(UserError, match="no mem0 store at"):
        create_inspector_app(auth=TOKENS, mem0=qdrant, embedding_model=HashEmbeddingModel())


@pytest.fixture
def parser() -> Iterator[argparse.ArgumentParser]:
    top = argparse.ArgumentParser()
    yield add_inspect_parser(top.add_subparsers())


async def test_inspect_mem0_opens_the_directory_and_closes_it(
    store: Any, ids: dict[str, str], qdrant: str, tmp_path: Path, parser: Any
) -> None:
    args = parser.parse_args(
        ["--mem0", qdrant, "--embedding", "hash", "--audit", str(tmp_path / "a.db")]
    )
    app, signin = build_app(args)
    token = signin.split("token=")[1]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inspector") as c:
        page = await c.get("/memory", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200 and "mem0" in page.text  # user "default": no memory
    assert "Nothing found" in page.text
    await app.state.inspector.aclose()
    assert app.state.inspector.owned == []
