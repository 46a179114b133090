"""The agentic memory prompt when nothing changed: no walk of the directory, a cold prompt
that waits for no scan, and the bounded delay for files other programs edit in place."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.agent import Agent
from mnemoscope.errors import UserError
from mnemoscope.memory.markdown._files import render_memory_file
from mnemoscope.memory.markdown._store import MemoryStore
from mnemoscope.memory.markdown._walk import RACY_WINDOW_NS, is_racy
from mnemoscope.message import UserMsg
from mnemoscope.middleware import AgenticMemoryMiddleware, ReplyContext
from mnemoscope.permission import PermissionMode
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import Edit, Read, Toolkit, Write
from mnemoscope.workspace import DirEntry, LocalBackend

# past the racy window, so a scan's marks of freshly made directories are trusted
SETTLE_S = 2.5 * RACY_WINDOW_NS / 1e9
BROKEN = "- broken.md: no frontmatter"


def note(name: str) -> str:
    return render_memory_file(name.title(), f"Read when {name} comes up", "project", "body")


async def seed(workdir: Path, n: int = 3) -> Path:
    memdir = workdir / "Memory"
    memdir.mkdir(parents=True)
    lines = []
    for i in range(n):
        (memdir / f"note_{i}.md").write_text(note(f"topic {i}"))
        lines.append(f"- [Topic {i}](note_{i}.md) — topic {i}\n")
    (memdir / "MEMORY.md").write_text("".join(lines))
    await asyncio.sleep(SETTLE_S)
    return memdir


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ListingBackend(LocalBackend):
    """The local disk through the generic backend path (stat + list), not scandir."""

    name = "listing"


class GatedBackend(ListingBackend):
    """Directory listings wait for a gate: a scan cannot finish until the test opens it."""

    def __init__(self, cwd: str) -> None:
        super().__init__(cwd=cwd)
        self.gate = asyncio.Event()

    async def list(self, path: str, *, roots: Any = None) -> list[DirEntry]:
        await self.gate.wait()
        return await super().list(path, roots=roots)


def make_agent(model: ScriptedChatModel, mw: AgenticMemoryMiddleware) -> Agent:
    return Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
        middlewares=[mw],
    )


def prompts(model: ScriptedChatModel) -> list[str]:
    return [c.system_prompt or "" for c in model.calls]


# -------------------------------------------------------- nothing changed: no walk
async def test_replies_walk_the_directory_only_once_when_nothing_changed(tmp_path: Path) -> None:
    await seed(tmp_path)
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), selection="local")
    model = ScriptedChatModel(["ok"] * 4)
    agent = make_agent(model, mw)
    for _ in range(4):
        await agent.reply("what about topic 1?")
        await mw.store.settle()
    assert mw.store.full_scans == 1
    first, *rest = prompts(model)
    assert all(p == first for p in rest) and "(note_1.md)" in first


async def test_files_created_by_other_programs_are_seen_at_the_next_reply(
    tmp_path: Path,
) -> None:
    memdir = await seed(tmp_path)
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval=False)
    model = ScriptedChatModel(["ok"] * 3)
    agent = make_agent(model, mw)
    await agent.reply("hi")
    await mw.store.settle()
    (memdir / "broken.md").write_text("no frontmatter")  # a new entry: the directory changes
    await agent.reply("hi")
    await mw.store.settle()
    assert mw.store.full_scans == 2
    await agent.reply("hi")
    assert BROKEN in prompts(model)[2]


async def test_a_write_by_the_agent_makes_the_next_reply_walk_again(tmp_path: Path) -> None:
    memdir = await seed(tmp_path)
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval=False)
    model = ScriptedChatModel(
        ["ok", tool_call("Write", file_path=str(memdir / "broken.md"), content="oops"), "ok", "ok"]
    )
    agent = make_agent(model, mw)
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    await agent.reply("hi")
    await mw.store.settle()
    await agent.reply("save something")
    await mw.store.settle()
    await agent.reply("hi")
    await mw.store.settle()
    assert BROKEN in prompts(model)[-1]


async def test_a_write_noted_in_this_process_is_seen_whatever_the_timestamps(
    tmp_path: Path,
) -> None:
    memdir = await seed(tmp_path)
    store = MemoryStore(str(tmp_path))
    other = MemoryStore(str(tmp_path))  # another agent's store of the same directory
    await store.refresh_if_stale()
    await other.refresh_if_stale()
    # an in-place edit: same inode, same directory entry, so no directory mark moves
    (memdir / "note_0.md").write_text("no frontmatter")
    assert (await store.refresh_if_stale()).invalid == []
    assert store.full_scans == 1
    store.note_write()  # what the middleware does after the agent's Write/Edit
    assert [f.filename for f in (await store.refresh_if_stale()).invalid] == ["note_0.md"]
    # the counter is shared by every store of the directory in this process
    assert [f.filename for f in (await other.refresh_if_stale()).invalid] == ["note_0.md"]
    # the store's own writes count too
    await store.write_text("note_1.md", "no frontmatter either")
    rescanned = await other.refresh_if_stale()
    assert [f.filename for f in rescanned.invalid] == ["note_0.md", "note_1.md"]


# ------------------------------------------ edits in place: noticed within the bound
async def test_external_in_place_edit_is_noticed_within_full_check_interval(
    tmp_path: Path,
) -> None:
    memdir = await seed(tmp_path)
    clock = FakeClock()
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval=False, full_check_interval=30)
    mw.store.clock = clock
    model = ScriptedChatModel(["ok"] * 4)
    agent = make_agent(model, mw)
    await agent.reply("hi")
    await mw.store.settle()
    # another program rewrites a memory in place (no rename: no directory changes)
    (memdir / "note_2.md").write_text("no frontmatter")
    clock.now += 29.9
    await agent.reply("hi")
    await mw.store.settle()
    assert mw.store.full_scans == 1  # within the interval: the previous scan is used
    clock.now += 0.1  # full_check_interval after the previous full scan
    await agent.reply("hi")
    await mw.store.settle()
    assert mw.store.full_scans == 2
    await agent.reply("hi")
    assert "- note_2.md: no frontmatter" in prompts(model)[-1]
    assert "note_2.md: no frontmatter" not in prompts(model)[1]


async def test_full_check_interval_zero_walks_at_every_reply(tmp_path: Path) -> None:
    await seed(tmp_path)
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval=False, full_check_interval=0)
    agent = make_agent(ScriptedChatModel(["ok"] * 3), mw)
    for _ in range(3):
        await agent.reply("hi")
        await mw.store.settle()
    assert mw.store.full_scans == 3


async def test_generic_backend_checks_directories_then_walks_only_on_change(
    tmp_path: Path,
) -> None:
    memdir = await seed(tmp_path)
    store = MemoryStore(str(tmp_path), ListingBackend(cwd=str(tmp_path)))
    first = await store.refresh_if_stale()
    assert await store.refresh_if_stale() is first
    assert store.full_scans == 1
    (memdir / "sub").mkdir()
    await asyncio.sleep(SETTLE_S)
    (memdir / "sub" / "deep.md").write_text("no frontmatter")
    second = await store.refresh_if_stale()
    assert store.full_scans == 2 and [f.filename for f in second.invalid] == ["sub/deep.md"]
    await asyncio.sleep(SETTLE_S)
    await store.refresh_if_stale()  # one more walk if the marks of that scan were racy
    scans = store.full_scans
    (memdir / "sub" / "deeper.md").write_text("no frontmatter")  # only "sub" changes
    third = await store.refresh_if_stale()
    assert store.full_scans == scans + 1 and "sub/deeper.md" in third.by_name()


# ------------------------------------------------------------------ the cold prompt
async def test_cold_prompt_does_not_wait_for_the_scan(tmp_path: Path) -> None:
    memdir = await seed(tmp_path)
    (memdir / "broken.md").write_text("no frontmatter")
    backend = GatedBackend(cwd=str(tmp_path))
    mw = AgenticMemoryMiddleware(str(tmp_path), backend, retrieval=False)
    agent = make_agent(ScriptedChatModel([]), mw)
    ctx = ReplyContext(agent=agent, input=UserMsg("user", "hi"))
    # the scan is held at its first listing; the prompt is built without it
    prompt = await asyncio.wait_for(mw.on_system_prompt(ctx, "base"), timeout=10)
    assert "(note_1.md)" in prompt and "broken.md" not in prompt
    assert not await mw.system_prompt_changed(ctx)
    backend.gate.set()
    await asyncio.wait_for(mw.store.settle(), timeout=10)
    # the scan found an invalid file: the prompt is rebuilt before the next step, once
    assert await mw.system_prompt_changed(ctx)
    assert BROKEN in await mw.on_system_prompt(ctx, "base")
    assert not await mw.system_prompt_changed(ctx)


# ---------------------------------------------------------------- configuration
@pytest.mark.parametrize("bad", [-1, float("nan"), "30", True])
def test_bad_full_check_interval_names_the_parameter(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(UserError, match="full_check_interval must be a number of seconds"):
        AgenticMemoryMiddleware(workdir=str(tmp_path), full_check_interval=bad)
    with pytest.raises(UserError, match="full_check_interval"):
        MemoryStore(str(tmp_path), full_check_interval=bad)


def test_a_directory_changed_just_before_its_mark_is_not_trusted() -> None:
    taken = 10**18
    assert is_racy(taken - RACY_WINDOW_NS // 2, 0, taken)  # same timestamp tick possible
    assert is_racy(0, taken - 1, taken)  # the ctime counts (utime cannot fake it)
    assert not is_racy(taken - 2 * RACY_WINDOW_NS, taken - 2 * RACY_WINDOW_NS, taken)
