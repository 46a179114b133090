"""The inspector app over httpx (no browser): auth, isolation, views and edits."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the 'inspector' extra (starlette) is not installed")

from mnemoscope.errors import UserError
from mnemoscope.inspector import (
    AuditLog,
    TokenFileAuth,
    create_inspector_app,
    load_token_file,
)
from mnemoscope.inspector._auth import COOKIE_NAME, csrf_value
from mnemoscope.memory import AsyncSQLAlchemyMemory, LocalLongTermMemory
from mnemoscope.message import AssistantMsg, UserMsg

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}

MakeWorld = Callable[..., Coroutine[Any, Any, Any]]


@pytest.fixture
async def world(make_world: MakeWorld) -> Any:
    return await make_world()


@pytest.fixture
async def client(world: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_inspector_app(
        store=world.store_url, auth=TOKENS, ltm=world.ltm_path, workdir=world.workdir
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inspector") as c:
        yield c
    await app.state.inspector.aclose()


def alice_urls(world: Any) -> list[str]:
    ids = world.alice_ids
    return [
        "/session?sid=s1",
        "/session?sid=s1&page=last",
        f"/session/message?sid=s1&msg={ids['question']}",
        f"/session/calls?sid=s1&msg={ids['question']}",
        f"/memory/item?id={ids['memory']}",
        "/agentic/file?name=tea.md",
    ]


# ---------------------------------------------------------------------------- auth
async def test_every_page_needs_a_valid_token(client: httpx.AsyncClient, world: Any) -> None:
    for path in ["/sessions", "/memory", "/agentic", "/audit", *alice_urls(world)]:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = await client.get(path, headers=headers)
            assert r.status_code == 401, path
            assert "Sign in" in r.text
            assert "Hangzhou" not in r.text and "green tea" not in r.text


async def test_sign_in_sets_an_httponly_cookie_and_a_bad_token_is_refused(
    client: httpx.AsyncClient,
) -> None:
    bad = await client.post("/signin", data={"token": "nope"})
    assert bad.status_code == 401 and "not valid" in bad.text
    assert COOKIE_NAME not in bad.cookies
    ok = await client.post("/signin", data={"token": "tok-alice"})
    assert ok.status_code == 303 and ok.headers["location"] == "/sessions"
    cookie = ok.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = await client.get("/sessions")  # the cookie alone signs in
    assert page.status_code == 200 and "signed in as <b>alice</b>" in page.text


async def test_a_cookie_post_without_the_csrf_value_is_refused(
    client: httpx.AsyncClient, world: Any
) -> None:
    await client.post("/signin", data={"token": "tok-alice"})
    mid = world.alice_ids["memory"]
    r = await client.post("/memory/item/edit", data={"id": mid, "content": "forged"})
    assert r.status_code == 403
    r = await client.post(
        "/memory/item/edit",
        data={"id": mid, "content": "Alice prefers oolong.", "csrf": csrf_value("tok-alice")},
    )
    assert r.status_code == 303
    async with LocalLongTermMemory(world.ltm_path) as ltm:
        item = await ltm.get(mid)
    assert item is not None and item.content == "Alice prefers oolong."


# ---------------------------------------------------------------------- isolation
async def test_a_second_user_gets_404_for_every_page_of_the_first(
    client: httpx.AsyncClient, world: Any
) -> None:
    for path in alice_urls(world):
        mine = await client.get(path, headers=ALICE)
        assert mine.status_code in (200, 303), path
        theirs = await client.get(path, headers=BOB)
        assert theirs.status_code == 404, path
        assert "Hangzhou" not in theirs.text and "green tea" not in theirs.text.lower()
    listing = await client.get("/sessions", headers=BOB)
    assert "b1" in listing.text and "s1" not in listing.text
    memories = await client.get("/memory", headers=BOB)
    assert "bees" in memories.text and "green tea" not in memories.text
    search = await client.get("/memory", params={"q": "green tea"}, headers=BOB)
    assert "Alice prefers" not in search.text and "0 memories match" in search.text
    agentic = await client.get("/agentic", headers=BOB)
    assert agentic.status_code == 200 and "tea.md" not in agentic.text


async def test_a_second_user_cannot_edit_or_delete_the_first_users_memory(
    client: httpx.AsyncClient, world: Any
) -> None:
    mid = world.alice_ids["memory"]
    r = await client.post("/memory/item/edit", data={"id": mid, "content": "x"}, headers=BOB)
    assert r.status_code == 404
    r = await client.post("/memory/item/delete", data={"id": mid}, headers=BOB)
    assert r.status_code == 404
    r = await client.post(
        "/agentic/file",
        data={"name": "tea.md", "text": "hacked", "version": "x"},
        headers=BOB,
    )
    assert r.status_code == 404
    async with LocalLongTermMemory(world.ltm_path) as ltm:
        item = await ltm.get(mid)
    assert item is not None and item.content == "Alice prefers green tea."
    tea = Path(world.workdir.replace("{user_id}", "alice")) / "Memory" / "tea.md"
    assert "hacked" not in tea.read_text()
    # bob's audit log holds nothing of these refused attempts, alice's nothing either
    for who in (ALICE, BOB):
        assert "ltm." not in (await client.get("/audit", headers=who)).text


async def test_a_deleted_memory_history_stays_private(
    client: httpx.AsyncClient, world: Any
) -> None:
    mid = world.alice_ids["memory"]
    r = await client.post("/memory/item/delete", data={"id": mid}, headers=ALICE)
    assert r.status_code == 303
    page = await client.get(f"/memory/item?id={mid}", headers=ALICE)
    assert page.status_code == 200 and "was deleted" in page.text and "delete" in page.text
    assert (await client.get(f"/memory/item?id={mid}", headers=BOB)).status_code == 404


# ----------------------------------------------------------------- conversation
async def test_conversation_shows_marks_tool_pairs_and_summary_links(
    client: httpx.AsyncClient, world: Any
) -> None:
    r = await client.get("/session?sid=s1", headers=ALICE)
    assert r.status_code == 200
    html = r.text
    for mark in ("summary", "hint", "tool_result", "compressed", "pinned"):
        assert f'<span class="badge {mark}">{mark}</span>' in html
    # the call and its result in one box
    pair = re.search(r'<div class="pair" data-tool-use="call_1">(.*?)</div></div>', html, re.S)
    assert pair is not None and "weather" in pair.group(1) and "sunny, 21 C" in pair.group(1)
    assert "shown with its call above" in html
    # the summary links to each message it covers
    for covered in (world.alice_ids["old1"],):
        assert f"/session/message?sid=s1&amp;msg={covered}" in html
    assert "covers 2 messages" in html
    # message text is escaped
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


async def test_a_summary_link_leads_to_the_page_and_anchor_of_the_message(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'big.db'}"
    async with AsyncSQLAlchemyMemory(url, user_id="alice", session_id="big") as mem:
        msgs = [UserMsg("alice", f"message {i}") for i in range(250)]
        await mem.add(msgs)
    app = create_inspector_app(store=url, auth=TOKENS, page_size=100)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://inspector"
    ) as c:
        r = await c.get(
            "/session/message", params={"sid": "big", "msg": msgs[120].id}, headers=ALICE
        )
        assert r.status_code == 303
        assert r.headers["location"] == f"/session?sid=big&page=2#m-{msgs[120].id}"
        page3 = await c.get("/session?sid=big&page=3", headers=ALICE)
        assert "message 249" in page3.text and "message 199<" not in page3.text
        assert page3.text.count('class="msg user') == 50
        assert "page 3 of 3" in page3.text
        last = await c.get("/session?sid=big&page=last", headers=ALICE)
        assert "page 3 of 3" in last.text
    await app.state.inspector.aclose()


async def test_a_tool_pair_split_by_a_page_edge_stays_a_pair(tmp_path: Path) -> None:
    from mnemoscope.message import ToolResultBlock, ToolUseBlock

    url = f"sqlite+aiosqlite:///{tmp_path / 'edge.db'}"
    step = AssistantMsg("agent", [ToolUseBlock(id="c9", name="lookup", input={})])
    result = UserMsg("tool", [ToolResultBlock(id="c9", name="lookup", output="found it")])
    async with AsyncSQLAlchemyMemory(url, user_id="alice", session_id="edge") as mem:
        await mem.add([UserMsg("alice", "q"), step, result])
    app = create_inspector_app(store=url, auth=TOKENS, page_size=2)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://inspector"
    ) as c:
        p1 = (await c.get("/session?sid=edge&page=1", headers=ALICE)).text
        p2 = (await c.get("/session?sid=edge&page=2", headers=ALICE)).text
    await app.state.inspector.aclose()
    assert "found it" in p1  # the result, on the next page, is shown with its call
    assert "shown with its call above" in p2


async def test_model_calls_of_a_reply_with_tokens_per_part(world: Any) -> None:
    app = create_inspector_app(
        store=world.store_url, auth=TOKENS, system_prompt="You are a weather bot.", max_tokens=60
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://inspector"
    ) as c:
        r = await c.get(
            "/session/calls",
            params={"sid": "s1", "msg": world.alice_ids["question"]},
            headers=ALICE,
        )
    await app.state.inspector.aclose()
    assert r.status_code == 200
    html = r.text
    assert html.count('<section class="call"') == 2
    assert "You are a weather bot." in html
    for part in ("system prompt", "current message", "hints", "transcript", "omitted history"):
        assert f"<td>{part}</td>" in html
    assert "<b>dropped</b>" in html  # a 60-token budget cannot hold the older history
    assert "injected long-term memories" in html  # said to be missing


async def test_model_calls_list_what_a_summary_in_the_input_covers(world: Any) -> None:
    app = create_inspector_app(store=world.store_url, auth=TOKENS)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://inspector"
    ) as c:
        r = await c.get(
            "/session/calls",
            params={"sid": "s1", "msg": world.alice_ids["question"]},
            headers=ALICE,
        )
    await app.state.inspector.aclose()
    compacted = r.text[r.text.index("<b>compacted</b>") :].split("</p>")[0]
    assert world.alice_ids["old1"] in compacted


async def test_model_call_source_is_pluggable(world: Any) -> None:
    from mnemoscope.inspector import ContextPart, ModelCallSourceBase, ModelCallView

    class Recorded(ModelCallSourceBase):
        async def calls(self, user_id: str, session_id: str, reply_start: str, entries: Any) -> Any:
            return [
                ModelCallView(
                    1,
                    None,
                    [ContextPart("index", 42, text="MEMORY.md index")],
                    source="recorded",
                    recalled_ids=["r-1"],
                )
            ]

    app = create_inspector_app(store=world.store_url, auth=TOKENS, calls=Recorded())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://inspector"
    ) as c:
        r = await c.get(
            "/session/calls",
            params={"sid": "s1", "msg": world.alice_ids["question"]},
            headers=ALICE,
        )
    await app.state.inspector.aclose()
    assert "recorded" in r.text and "MEMORY.md index" in r.text and "<b>recalled</b>" in r.text


# -------------------------------------------------------------- long-term memory
async def test_search_edit_and_history_of_a_memory_with_audit(
    client: httpx.AsyncClient, world: Any
) -> None:
    mid = world.alice_ids["memory"]
    found = await client.get("/memory", params={"q": "tea"}, headers=ALICE)
    assert f'data-memory="{mid}"' in found.text
    r = await client.post(
        "/memory/item/edit",
        data={"id": mid, "content": "Alice prefers jasmine tea."},
        headers=ALICE,
    )
    assert r.status_code == 303
    page = (await client.get(f"/memory/item?id={mid}", headers=ALICE)).text
    history = page[page.index('<table class="history">') :]
    assert "Alice prefers green tea." in history and "Alice prefers jasmine tea." in history
    assert '<span class="badge update">update</span>' in history
    audit = page[page.index('<table class="audit">') :]
    assert "<td>alice</td>" in audit and "ltm.update" in audit
    log = (await client.get("/audit", headers=ALICE)).text
    assert "jasmine" in log and mid in log


async def test_an_empty_edit_is_refused_with_a_message(
    client: httpx.AsyncClient, world: Any
) -> None:
    mid = world.alice_ids["memory"]
    r = await client.post("/memory/item/edit", data={"id": mid, "content": "  "}, headers=ALICE)
    assert r.status_code == 409 and "non-empty" in r.text
    assert "ltm.update" not in (await client.get("/audit", headers=ALICE)).text


async def test_editing_a_store_with_vectors_needs_its_embedder(tmp_path: Path) -> None:
    from mnemoscope.testing import HashEmbeddingModel

    path = str(tmp_path / "vec.db")
    async with LocalLongTermMemory(path, embedding_model=HashEmbeddingModel()) as ltm:
        mid = (await ltm.record("Alice rides a red bike.", user_id="alice")).added[0].id
    for embedder, status in ((None, 409), (HashEmbeddingModel(), 303)):
        app = create_inspector_app(auth=TOKENS, ltm=path, embedding_model=embedder)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://inspector"
        ) as c:
            r = await c.post(
                "/memory/item/edit",
                data={"id": mid, "content": "Alice rides a blue bike."},
                headers=ALICE,
            )
        await app.state.inspector.aclose()
        assert r.status_code == status
        if status == 409:
            assert "embedd" in r.text


# ---------------------------------------------------------------- agentic memory
async def test_agentic_memory_index_files_and_doctor(client: httpx.AsyncClient, world: Any) -> None:
    r = await client.get("/agentic", headers=ALICE)
    assert r.status_code == 200
    assert "tea.md" in r.text and "broken.md" in r.text
    assert "dangling_index_line" in r.text  # MEMORY.md points to gone.md
    assert "invalid_frontmatter" in r.text or "missing field" in r.text


async def test_agentic_edit_goes_through_the_store_with_version_and_audit(
    client: httpx.AsyncClient, world: Any
) -> None:
    tea = Path(world.workdir.replace("{user_id}", "alice")) / "Memory" / "tea.md"
    page = (await client.get("/agentic/file?name=tea.md", headers=ALICE)).text
    version = re.search(r'name="version" value="([^"]+)"', page)
    assert version is not None
    new = tea.read_text().replace("no sugar", "one sugar")
    r = await client.post(
        "/agentic/file",
        data={"name": "tea.md", "text": new.replace("\n", "\r\n"), "version": version.group(1)},
        headers=ALICE,
    )
    assert r.status_code == 303
    assert tea.read_text() == new
    # the same, now stale, version is refused: the file changed since that page was read
    again = await client.post(
        "/agentic/file",
        data={"name": "tea.md", "text": "lost update", "version": version.group(1)},
        headers=ALICE,
    )
    assert again.status_code == 409
    assert tea.read_text() == new
    audit = (await client.get("/audit", headers=ALICE)).text
    assert "agentic.write" in audit and "one sugar" in audit


async def test_agentic_paths_outside_the_memory_directory_are_not_found(
    client: httpx.AsyncClient, world: Any
) -> None:
    secret = Path(world.workdir.replace("{user_id}", "alice")) / "secret.txt"
    secret.write_text("top secret")
    for name in ("../secret.txt", "/etc/passwd", "../../bob/Memory/MEMORY.md"):
        r = await client.get("/agentic/file", params={"name": name}, headers=ALICE)
        assert r.status_code == 404, name
        w = await client.post(
            "/agentic/file", data={"name": name, "text": "x", "version": "v"}, headers=ALICE
        )
        assert w.status_code == 404, name
    assert secret.read_text() == "top secret"


async def test_a_memory_dir_linked_outside_the_workdir_is_refused(tmp_path: Path) -> None:
    work = tmp_path / "w" / "alice"
    work.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "MEMORY.md").write_text("- [x](x.md) — secret index\n")
    (work / "Memory").symlink_to(outside)
    app = create_inspector_app(auth=TOKENS, workdir=str(tmp_path / "w" / "{user_id}"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://inspector"
    ) as c:
        r = await c.get("/agentic", headers=ALICE)
    await app.state.inspector.aclose()
    assert r.status_code == 409 and "not inside the workdir" in r.text
    assert "secret index" not in r.text


# ------------------------------------------------------------------ configuration
def test_token_file_formats_and_errors(tmp_path: Path) -> None:
    lines = tmp_path / "t.txt"
    lines.write_text("# tokens\ntok-a alice\n\ntok-b bob\n")
    assert load_token_file(lines) == {"tok-a": "alice", "tok-b": "bob"}
    js = tmp_path / "t.json"
    js.write_text('{"tok-a": "alice"}')
    auth = TokenFileAuth(js)
    assert auth("tok-a") == "alice" and auth("tok-x") is None and auth("") is None
    for text, match in (
        ("tok-a alice extra\n", "expected 'TOKEN USER_ID'"),
        ("tok-a alice\ntok-a bob\n", "listed twice"),
        ("# nothing\n", "lists no token"),
        ('{"tok": 3}', "map token strings"),
    ):
        bad = tmp_path / "bad.txt"
        bad.write_text(text)
        with pytest.raises(UserError, match=match):
            load_token_file(bad)
    with pytest.raises(UserError, match="cannot read the token file"):
        load_token_file(tmp_path / "missing.txt")


async def test_async_auth_function_is_accepted(world: Any) -> None:
    async def resolve(token: str) -> str | None:
        return {"secret": "alice"}.get(token)

    app = create_inspector_app(store=world.store_url, auth=resolve)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://inspector"
    ) as c:
        ok = await c.get("/sessions", headers={"Authorization": "Bearer secret"})
        no = await c.get("/sessions", headers={"Authorization": "Bearer tok-alice"})
    await app.state.inspector.aclose()
    assert ok.status_code == 200 and "s1" in ok.text
    assert no.status_code == 401


def test_a_shared_workdir_with_several_users_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"\{user_id\}"):
        create_inspector_app(auth=TOKENS, workdir=str(tmp_path))
    # one user: a plain workdir is fine
    create_inspector_app(auth={"t": "me"}, workdir=str(tmp_path))


async def test_user_ids_that_are_not_a_path_component_get_no_workdir(tmp_path: Path) -> None:
    app = create_inspector_app(auth={"t": "../alice"}, workdir=str(tmp_path / "{user_id}"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://inspector"
    ) as c:
        r = await c.get("/agentic", headers={"Authorization": "Bearer t"})
    await app.state.inspector.aclose()
    assert r.status_code == 404


async def test_audit_log_is_per_user_and_append_only(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.db")
    await log.record("alice", "ltm.update", "m1", before="a", after="b")
    await log.record("bob", "ltm.delete", "m2", before="c")
    await log.aclose()
    reopened = AuditLog(tmp_path / "a.db")
    mine = await reopened.entries("alice")
    assert [(x.user_id, x.action, x.target, x.before, x.after) for x in mine] == [
        ("alice", "ltm.update", "m1", "a", "b")
    ]
    assert not hasattr(reopened, "delete")
    await reopened.aclose()


async def test_app_works_under_a_mount_prefix(world: Any) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    inspector = create_inspector_app(store=world.store_url, auth=TOKENS)
    outer = Starlette(routes=[Mount("/inspect", app=inspector)])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=outer), base_url="http://svc"
    ) as c:
        r = await c.post("/inspect/signin", data={"token": "tok-alice"})
        assert r.status_code == 303 and r.headers["location"] == "/inspect/sessions"
        assert "path=/inspect" in r.headers["set-cookie"].lower()
        page = await c.get("/inspect/sessions")
        assert 'href="/inspect/session?sid=s1"' in page.text
    await inspector.state.inspector.aclose()
