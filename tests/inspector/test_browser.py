"""The inspector in a real browser: Playwright driving Debian's Chromium (headless).

Never downloads a browser: Chromium is the ``chromium`` package (``/usr/bin/chromium``).
The server is uvicorn in a thread on a free port. Screenshots of the views are written to
``docs/img/inspector-*.png`` (used by ``docs/inspector.md``). The first-screen time of a
5,000-message session is measured and printed, never asserted.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("MNEMOSCOPE_CHROMIUM", "/usr/bin/chromium")
IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
REQUIRE = os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1"

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")


def _need(ok: bool, why: str) -> None:
    if ok:
        return
    if REQUIRE:
        pytest.fail(why + " (MNEMOSCOPE_REQUIRE_SERVICES=1 forbids skipping)")
    pytest.skip(why)


pytestmark = pytest.mark.slow

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
BIG = 5_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _big_session(url: str) -> None:
    from mnemoscope.memory import AsyncSQLAlchemyMemory
    from mnemoscope.message import AssistantMsg, UserMsg

    async with AsyncSQLAlchemyMemory(url, user_id="alice", session_id="big") as mem:
        msgs = []
        for i in range(BIG // 2):
            msgs.append(UserMsg("alice", f"question {i}: what about item {i}?"))
            msgs.append(AssistantMsg("agent", f"answer {i}: item {i} is fine. " * 3))
        await mem.add(msgs)


async def _running_reply(url: str, finish: bool = False) -> str:
    """Session ``live``: a reply whose first call asked for a tool; ``finish`` stores the
    tool's result and the answer, as the agent does when the reply goes on."""
    from mnemoscope.memory import AsyncSQLAlchemyMemory
    from mnemoscope.message import AssistantMsg, ToolResultBlock, ToolUseBlock, UserMsg

    async with AsyncSQLAlchemyMemory(url, user_id="alice", session_id="live") as mem:
        if not finish:
            question = UserMsg("alice", "Will it rain in Hangzhou tomorrow?")
            await mem.add(question)
            return question.id
        step = AssistantMsg("agent", [ToolUseBlock(id="f1", name="forecast", input={})])
        result = UserMsg("tool", [ToolResultBlock(id="f1", name="forecast", output="rain")])
        await mem.add([step, result])
        await mem.add(AssistantMsg("agent", "Yes, take an umbrella."))
        return step.id


def _in_thread(coro: Any) -> Any:
    """Run a coroutine on its own loop (the sync Playwright API owns this thread's)."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(asyncio.run(coro)))
    worker.start()
    worker.join(30)
    return out[0]


@pytest.fixture
def server(world_sync: Any, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    _need(Path(CHROMIUM).exists(), f"Chromium is missing at {CHROMIUM}: apt-get install chromium")
    pytest.importorskip("playwright", reason="playwright is not installed: pip install playwright")
    uvicorn = pytest.importorskip("uvicorn", reason="the 'inspector' extra is not installed")
    from mnemoscope.inspector import create_inspector_app

    asyncio.run(_big_session(world_sync.store_url))
    world_sync.alice_ids["live"] = asyncio.run(_running_reply(world_sync.store_url))
    app = create_inspector_app(
        store=world_sync.store_url,
        auth=TOKENS,
        ltm=world_sync.ltm_path,
        workdir=world_sync.workdir,
        audit=str(tmp_path / "audit.db"),
        system_prompt="You are a helpful weather assistant.",
    )
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", world_sync
    finally:
        srv.should_exit = True
        thread.join(timeout=15)


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield b
        finally:
            b.close()


def _sign_in(page: Any, base: str, token: str) -> None:
    page.goto(f"{base}/sessions")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/sessions")


def test_browser_sessions_calls_memory_and_isolation(server: tuple[str, Any], browser: Any) -> None:
    base, world = server
    IMG.mkdir(parents=True, exist_ok=True)
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    ctx.set_default_timeout(15_000)
    page = ctx.new_page()

    # sign in
    first = page.goto(f"{base}/sessions")
    assert first is not None and first.status == 401
    _sign_in(page, base, "tok-alice")
    assert page.locator("header .who").inner_text().endswith("alice")

    # open a session, see the summary and what it covers
    page.click("text=s1")
    summary = page.locator(".msg.marked-summary")
    assert summary.locator(".badge.summary").first.is_visible()
    assert "covers 2 messages" in summary.inner_text()
    pair = page.locator('.pair[data-tool-use="call_1"]')
    assert "sunny, 21 C" in pair.inner_text()
    page.screenshot(path=str(IMG / "inspector-session.png"), full_page=True)
    summary.locator(".covers a").first.click()
    page.wait_for_url(f"**#m-{world.alice_ids['old1']}")

    # the context of a model call
    page.goto(f"{base}/session?sid=s1")
    page.click(f"#m-{world.alice_ids['question']} >> text=model calls of this reply")
    calls = page.locator("section.call")
    assert calls.count() == 2
    assert "You are a helpful weather assistant." in calls.first.inner_text()
    assert "current message" in calls.first.inner_text()
    page.screenshot(path=str(IMG / "inspector-calls.png"), full_page=True)

    # a reply still running: its calls update while it runs, without a reload
    page.goto(f"{base}/session/calls?sid=live&msg={world.alice_ids['live']}")
    assert "in progress" in page.inner_text("#calls section.call")
    page.evaluate("() => { window.notReloaded = true; }")
    page.screenshot(path=str(IMG / "inspector-live.png"), full_page=True)
    _in_thread(_running_reply(world.store_url, finish=True))
    page.wait_for_selector("#calls:not([data-live])")
    assert page.evaluate("() => window.notReloaded") is True
    assert page.locator("section.call").count() == 2
    assert "in progress" not in page.inner_text("#calls")

    # search a memory, edit it, see the edit in its history
    page.click("header >> text=Long-term memory")
    page.fill("input[name=q]", "tea")
    page.click("text=Search")
    page.click("text=Alice prefers green tea.")
    page.fill("textarea[name=content]", "Alice prefers jasmine tea, no sugar.")
    page.click("text=Save")
    history = page.locator("table.history")
    assert "Alice prefers green tea." in history.inner_text()
    assert "Alice prefers jasmine tea, no sugar." in history.inner_text()
    assert "ltm.update" in page.locator("table.audit").inner_text()
    page.screenshot(path=str(IMG / "inspector-memory.png"), full_page=True)

    page.click("header >> text=Markdown memory")
    assert "dangling_index_line" in page.inner_text("ul.findings")
    page.screenshot(path=str(IMG / "inspector-agentic.png"), full_page=True)

    # a 5,000-message session: time to the first screen (measured, not asserted)
    started = time.perf_counter()
    page.goto(f"{base}/session?sid=big")
    page.locator(".msg").first.wait_for()
    wall = (time.perf_counter() - started) * 1000
    nav = page.evaluate(
        "() => { const n = performance.getEntriesByType('navigation')[0];"
        " const p = performance.getEntriesByName('first-contentful-paint')[0];"
        " return {dcl: n.domContentLoadedEventEnd, fcp: p ? p.startTime : null}; }"
    )
    assert f"{BIG:,} messages" in page.inner_text("main")
    print(
        f"\n5,000-message session, first screen: first contentful paint "
        f"{nav['fcp'] or float('nan'):.0f} ms, DOMContentLoaded {nav['dcl']:.0f} ms, "
        f"goto+first message {wall:.0f} ms (not asserted)"
    )
    ctx.close()

    # a second user cannot open the first user's pages by any URL
    other = browser.new_context()
    other.set_default_timeout(15_000)
    bob = other.new_page()
    _sign_in(bob, base, "tok-bob")
    ids = world.alice_ids
    for path in (
        "/session?sid=s1",
        "/session?sid=big&page=last",
        f"/session/message?sid=s1&msg={ids['question']}",
        f"/session/calls?sid=s1&msg={ids['question']}",
        f"/memory/item?id={ids['memory']}",
        "/agentic/file?name=tea.md",
    ):
        resp = bob.goto(base + path)
        assert resp is not None and resp.status == 404, path
        assert "Hangzhou" not in bob.inner_text("main") and "jasmine" not in bob.content()
    bob.goto(f"{base}/sessions")
    assert "b1" in bob.inner_text("main") and "big" not in bob.inner_text("main")
    other.close()


@pytest.fixture
def mem0_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The inspector over a real mem0 store (local Qdrant, hash embedder, no LLM)."""
    _need(Path(CHROMIUM).exists(), f"Chromium is missing at {CHROMIUM}: apt-get install chromium")
    pytest.importorskip("playwright", reason="playwright is not installed: pip install playwright")
    uvicorn = pytest.importorskip("uvicorn", reason="the 'inspector' extra is not installed")
    from mnemoscope.memory import Mem0LongTermMemory

    pytest.importorskip("mem0", reason="the 'mem0' extra (mem0ai) is not installed")
    from mnemoscope.inspector import create_inspector_app
    from mnemoscope.testing import HashEmbeddingModel, ScriptedChatModel

    store = Mem0LongTermMemory(
        chat_model=ScriptedChatModel(),
        embedding_model=HashEmbeddingModel(),
        path=str(tmp_path / "qdrant"),
    )
    recorded = asyncio.run(store.record("Alice prefers green tea.", user_id="alice", infer=False))
    app = create_inspector_app(auth=TOKENS, mem0=store, audit=str(tmp_path / "audit.db"))
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", recorded.added[0].id
    finally:
        srv.should_exit = True
        thread.join(timeout=15)
        store.close_sync()


def test_browser_mem0_search_edit_and_history(mem0_server: tuple[str, str], browser: Any) -> None:
    base, memory_id = mem0_server
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    ctx.set_default_timeout(15_000)
    page = ctx.new_page()
    _sign_in(page, base, "tok-alice")
    page.click("header >> text=Long-term memory")
    assert "mem0" in page.inner_text("h1")
    page.fill("input[name=q]", "green tea")
    page.click("text=Search")
    page.click("text=Alice prefers green tea.")
    page.fill("textarea[name=content]", "Alice prefers oolong now.")
    page.click("text=Save")
    history = page.locator("table.history").inner_text()
    assert "Alice prefers green tea." in history and "Alice prefers oolong now." in history
    assert "ltm.update" in page.locator("table.audit").inner_text()
    page.screenshot(path=str(IMG / "inspector-mem0.png"), full_page=True)
    ctx.close()

    other = browser.new_context()
    other.set_default_timeout(15_000)
    bob = other.new_page()
    _sign_in(bob, base, "tok-bob")
    resp = bob.goto(f"{base}/memory/item?id={memory_id}")
    assert resp is not None and resp.status == 404 and "oolong" not in bob.content()
    other.close()
