"""Hardening of the agentic memory (issue 10): confinement of the memory directory
(item 2) and a bounded read of ``MEMORY.md`` (item 12)."""

from __future__ import annotations

import os
import shutil
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.agent import Agent
from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory.markdown._doctor import diagnose, repair
from mnemoscope.memory.markdown._files import render_memory_file
from mnemoscope.memory.markdown._store import MAX_INDEX_BYTES, MemoryStore
from mnemoscope.middleware import AgenticMemoryMiddleware, MemoryEvent, ToolResultEvent
from mnemoscope.permission import PermissionMode
from mnemoscope.testing import ScriptedCall, ScriptedChatModel, tool_call
from mnemoscope.tool import Edit, FunctionTool, Read, Toolkit, Write

SECRET = "TOPSECRET-7f3a"
NOTE = render_memory_file(
    "Planted", "Read when anything at all is asked", "user", f"The secret is {SECRET}."
)
PROFILE = render_memory_file(
    "User profile", "Read when the answer depends on where the user lives", "user", "Hangzhou."
)


def make_agent(model: ScriptedChatModel, mw: AgenticMemoryMiddleware, *tools: Any) -> Agent:
    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit(), *tools]),
        middlewares=[mw],
    )
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    return agent


def outside_dir(tmp_path: Path) -> Path:
    """A directory outside the workdir holding a secret and a valid memory file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (outside / "planted.md").write_text(NOTE)
    return outside


def realpath(path: Path) -> str:
    return os.path.realpath(path)


def link(path: Path, target: str) -> None:
    path.symlink_to(target)


def errors_of(events: list[Any]) -> list[str]:
    return [e.message for e in events if isinstance(e, MemoryEvent) and e.action == "error"]


# ------------------------------------------------------------- item 2: at agent build
def test_memory_dir_linked_to_root_is_refused_at_agent_build(tmp_path: Path) -> None:
    workdir = tmp_path / "repo"
    workdir.mkdir()
    (workdir / "Memory").symlink_to("/")
    mw = AgenticMemoryMiddleware(workdir=str(workdir))
    with pytest.raises(UserError, match=r"resolves to /, which is not inside the workdir"):
        make_agent(ScriptedChatModel(["unused"]), mw)


def test_memory_dir_linked_outside_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    outside = outside_dir(tmp_path)
    workdir = tmp_path / "repo"
    workdir.mkdir()
    (workdir / "Memory").symlink_to(outside)
    mw = AgenticMemoryMiddleware(workdir=str(workdir))
    agent_model = ScriptedChatModel(["unused"])
    with pytest.raises(UserError, match="remove the link"):
        make_agent(agent_model, mw)
    assert not (outside / "MEMORY.md").exists()


@pytest.mark.parametrize("target", [".", ".."])
def test_memory_dir_linked_to_the_workdir_or_above_is_refused(tmp_path: Path, target: str) -> None:
    workdir = tmp_path / "repo"
    workdir.mkdir()
    (workdir / "Memory").symlink_to(target)
    with pytest.raises(UserError, match="not inside the workdir"):
        make_agent(ScriptedChatModel(["unused"]), AgenticMemoryMiddleware(workdir=str(workdir)))


def test_memory_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    workdir = tmp_path / "repo"
    workdir.mkdir()
    (workdir / "Memory").write_text("not a directory")
    with pytest.raises(UserError, match="is not a directory"):
        make_agent(ScriptedChatModel(["unused"]), AgenticMemoryMiddleware(workdir=str(workdir)))


async def test_memory_dir_linked_inside_the_workdir_works_and_grants_the_real_path(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "repo"
    real = workdir / ".memories"
    real.mkdir(parents=True)
    (real / "user_profile.md").write_text(PROFILE)
    (real / "MEMORY.md").write_text("- [User profile](user_profile.md) — where the user lives\n")
    (workdir / "Memory").symlink_to(".memories")
    mw = AgenticMemoryMiddleware(workdir=str(workdir), selection="local")
    model = ScriptedChatModel(["ok"])
    agent = make_agent(model, mw)
    grant = agent.state.permission_context.working_directories[mw.memory_dir]
    assert grant.path == realpath(real)
    events = [e async for e in agent.reply_stream("where does the user live?")]
    assert errors_of(events) == []
    assert "- [User profile](user_profile.md)" in model.calls[-1].system_prompt


# ------------------------------------------------------ item 2: the store (CLI path)
async def test_store_refuses_to_walk_read_or_create_in_a_linked_memory_dir(
    tmp_path: Path,
) -> None:
    outside = outside_dir(tmp_path)
    workdir = tmp_path / "repo"
    workdir.mkdir()
    (workdir / "Memory").symlink_to(outside)
    store = MemoryStore(str(workdir))
    with pytest.raises(MemoryStoreError, match="not inside the workdir"):
        await store.scan()
    with pytest.raises(MemoryStoreError, match="not inside the workdir"):
        await store.ensure_layout()
    assert not (outside / "MEMORY.md").exists()
    with pytest.raises(MemoryStoreError, match="not inside the workdir"):
        await MemoryStore(str(workdir)).read_index()


async def test_scan_skips_linked_files_and_directories(tmp_path: Path) -> None:
    outside = outside_dir(tmp_path)
    memdir = tmp_path / "repo" / "Memory"
    memdir.mkdir(parents=True)
    (memdir / "user_profile.md").write_text(PROFILE)
    (memdir / "leak.md").symlink_to(outside / "planted.md")
    (memdir / "sub").symlink_to(outside)
    scan = await MemoryStore(str(tmp_path / "repo")).scan()
    assert [f.filename for f in scan.files] == ["user_profile.md"]


async def test_linked_memory_file_is_not_read_for_retrieval(tmp_path: Path) -> None:
    outside = outside_dir(tmp_path)
    memdir = tmp_path / "repo" / "Memory"
    memdir.mkdir(parents=True)
    (memdir / "planted.md").write_text(NOTE)
    store = MemoryStore(str(tmp_path / "repo"))
    assert await store.read_text("planted.md") == NOTE
    # replaced by a link after the scan saw a regular file: refused, not followed
    (memdir / "planted.md").unlink()
    (memdir / "planted.md").symlink_to(outside / "secret.txt")
    with pytest.raises(MemoryStoreError, match=r"symbolic link|outside"):
        await store.read_text("planted.md")


# ----------------------------------------------------- item 2: MEMORY.md as a link
@pytest.mark.parametrize("where", ["outside", "inside"])
async def test_linked_index_stays_out_of_the_prompt(tmp_path: Path, where: str) -> None:
    outside = outside_dir(tmp_path)
    memdir = tmp_path / "repo" / "Memory"
    memdir.mkdir(parents=True)
    if where == "outside":
        (memdir / "MEMORY.md").symlink_to(outside / "secret.txt")
    else:  # even a link to another file of the memory directory is not shown
        (memdir / "notes.txt").write_text(SECRET)
        (memdir / "MEMORY.md").symlink_to("notes.txt")
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path / "repo"), retrieval=False)
    model = ScriptedChatModel(["ok", "ok again"])
    agent = make_agent(model, mw)
    events = [e async for e in agent.reply_stream("hello")]
    prompt = model.calls[0].system_prompt
    assert SECRET not in prompt
    assert "## MEMORY.md" in prompt  # the rest of the memory section is still there
    assert any("the index is not shown" in m for m in errors_of(events))
    assert (memdir / "MEMORY.md").is_symlink()  # left alone, not replaced
    await agent.reply("hello again")
    assert SECRET not in model.calls[1].system_prompt


# ------------------------------------------------- item 2: a link planted mid-reply
def planting_tool(memdir: Path, outside: Path) -> FunctionTool:
    def plant() -> str:
        """Replace the memory directory by a link to another directory."""
        memdir.rename(memdir.with_name("Memory.old"))
        memdir.symlink_to(outside)
        return "planted"

    return FunctionTool(plant, is_read_only=True, auto_allow=True)


def seeded(tmp_path: Path) -> tuple[Path, Path, Path]:
    outside = outside_dir(tmp_path)
    workdir = tmp_path / "repo"
    memdir = workdir / "Memory"
    memdir.mkdir(parents=True)
    (memdir / "MEMORY.md").write_text("- [User profile](user_profile.md) — where\n")
    (memdir / "user_profile.md").write_text(PROFILE)
    return outside, workdir, memdir


async def test_link_planted_by_a_tool_is_caught_before_the_next_model_call(
    tmp_path: Path,
) -> None:
    outside, workdir, memdir = seeded(tmp_path)
    mw = AgenticMemoryMiddleware(workdir=str(workdir), retrieval=False)
    seen: dict[str, Any] = {}

    def second(call: ScriptedCall) -> Any:
        seen["grants"] = dict(agent.state.permission_context.working_directories)
        seen["prompt"] = call.system_prompt
        return tool_call("Read", file_path=f"{memdir}/secret.txt")

    model = ScriptedChatModel([tool_call("plant"), second, "done"])
    agent = make_agent(model, mw, planting_tool(memdir, outside))
    agent.state.permission_context.cwd = str(tmp_path / "elsewhere")
    events = [e async for e in agent.reply_stream("hello")]

    assert mw.memory_dir not in seen["grants"]  # withdrawn before the model call
    assert "Long-term memory is unavailable in this reply" in seen["prompt"]
    assert "- [User profile]" not in seen["prompt"]
    read = [e.result for e in events if isinstance(e, ToolResultEvent)][-1]
    assert read.is_error and SECRET not in read.output_text()
    assert [m for m in errors_of(events) if "disabled for this reply" in m]
    assert len(errors_of(events)) == 1  # reported once, not at every step

    # the next reply checks again: still a link, still disabled, nothing created there
    model.queue("still off")
    events = [e async for e in agent.reply_stream("again")]
    assert any("disabled for this reply" in m for m in errors_of(events))
    assert not (outside / "MEMORY.md").exists()

    # once the directory is back, the next reply uses memory and grants it again
    memdir.unlink()
    memdir.with_name("Memory.old").rename(memdir)
    model.queue("back")
    events = [e async for e in agent.reply_stream("and now?")]
    assert errors_of(events) == []
    assert mw.memory_dir in agent.state.permission_context.working_directories
    assert "- [User profile]" in model.calls[-1].system_prompt


async def test_link_planted_by_a_tool_is_caught_before_the_next_tool_of_the_same_step(
    tmp_path: Path,
) -> None:
    outside, workdir, memdir = seeded(tmp_path)
    mw = AgenticMemoryMiddleware(workdir=str(workdir), retrieval=False)
    model = ScriptedChatModel(
        [[tool_call("plant"), tool_call("Read", file_path=f"{memdir}/secret.txt")], "done"]
    )
    agent = make_agent(model, mw, planting_tool(memdir, outside))
    agent.state.permission_context.cwd = str(tmp_path / "elsewhere")
    events = [e async for e in agent.reply_stream("hello")]
    read = [e.result for e in events if isinstance(e, ToolResultEvent)][-1]
    assert read.is_error and SECRET not in read.output_text()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
async def test_linked_memory_dir_in_a_sandbox_is_refused_at_the_first_reply(
    tmp_path: Path,
) -> None:
    from mnemoscope.workspace import BubblewrapWorkspace

    workspace = BubblewrapWorkspace(workdir=str(tmp_path / "sandbox"))
    await workspace.initialize()
    try:
        link(Path(workspace.workdir, "Memory"), "/")
        mw = AgenticMemoryMiddleware(workdir=workspace.workdir, backend=workspace.get_backend())
        model = ScriptedChatModel(["ok"])
        agent = Agent(
            name="assistant",
            system_prompt="You are a helpful assistant.",
            model=model,
            toolkit=Toolkit(tools=await workspace.list_tools()),
            middlewares=[mw],
        )
        events = [e async for e in agent.reply_stream("hello")]
        assert any("resolves to /," in m for m in errors_of(events))
        assert mw.memory_dir not in agent.state.permission_context.working_directories
        assert "Long-term memory is unavailable" in model.calls[0].system_prompt
    finally:
        await workspace.close()


# --------------------------------------------------------- item 12: a huge MEMORY.md
def write_huge_index(path: Path, size: int) -> None:
    """One line of ``size`` bytes, written in chunks (never one big string here)."""
    chunk = b"a" * (1 << 20)
    with open(path, "wb") as f:
        f.write(b"- [Huge](huge.md) \xe2\x80\x94 ")
        left = size - f.tell()
        while left > 0:
            f.write(chunk[:left])
            left -= len(chunk)


async def test_huge_one_line_index_is_read_bounded(tmp_path: Path) -> None:
    memdir = tmp_path / "repo" / "Memory"
    memdir.mkdir(parents=True)
    write_huge_index(memdir / "MEMORY.md", 50 * 1024 * 1024)
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path / "repo"), retrieval=False)
    model = ScriptedChatModel(["ok"])
    agent = make_agent(model, mw)
    tracemalloc.start()
    try:
        await agent.reply("hello")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, peak  # the file is 50 MB; the read limit is 256 KiB
    prompt = model.calls[0].system_prompt
    assert len(prompt) < 20_000
    assert f"over the {MAX_INDEX_BYTES} byte read limit" in prompt
    assert "1 line(s) of MEMORY.md are longer than 1000 characters and were cut" in prompt
    assert "- [Huge](huge.md)" in prompt


async def test_index_with_a_cut_line_does_not_count_as_read(tmp_path: Path) -> None:
    memdir = tmp_path / "repo" / "Memory"
    memdir.mkdir(parents=True)
    long_line = "- [Long](long.md) — " + "word " * 300  # 1,520 characters, few tokens
    (memdir / "MEMORY.md").write_text(long_line + "\n")
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path / "repo"), retrieval=False)
    model = ScriptedChatModel(
        [
            tool_call(
                "Edit",
                file_path=f"{memdir}/MEMORY.md",
                old_string="- [Long](long.md)",
                new_string="- [Short](long.md)",
            ),
            "done",
        ]
    )
    agent = make_agent(model, mw)
    events = [e async for e in agent.reply_stream("shorten the index")]
    assert "[... line cut]" in model.calls[0].system_prompt
    edit = next(e.result for e in events if isinstance(e, ToolResultEvent))
    assert edit.is_error and "Read" in edit.output_text()
    assert (memdir / "MEMORY.md").read_text() == long_line + "\n"


async def test_index_over_the_byte_limit_does_not_count_as_read(tmp_path: Path) -> None:
    memdir = tmp_path / "repo" / "Memory"
    memdir.mkdir(parents=True)
    lines = [f"- [M{i}](m{i}.md) — memory {i}" for i in range(12_000)]  # ~330 KB
    (memdir / "MEMORY.md").write_text("\n".join(lines) + "\n")
    mw = AgenticMemoryMiddleware(
        workdir=str(tmp_path / "repo"),
        retrieval=False,
        index_max_lines=10**6,
        index_max_tokens=10**7,
    )
    model = ScriptedChatModel(
        [
            tool_call(
                "Edit",
                file_path=f"{memdir}/MEMORY.md",
                old_string="- [M0](m0.md) — memory 0\n",
                new_string="",
            ),
            "done",
        ]
    )
    agent = make_agent(model, mw)
    events = [e async for e in agent.reply_stream("drop the first memory")]
    prompt = model.calls[0].system_prompt
    assert "- [M0](m0.md)" in prompt and "- [M11999](m11999.md)" not in prompt
    edit = next(e.result for e in events if isinstance(e, ToolResultEvent))
    assert edit.is_error and "Read" in edit.output_text()


async def test_doctor_reports_a_huge_index_and_never_rewrites_it(tmp_path: Path) -> None:
    memdir = tmp_path / "repo" / "Memory"
    memdir.mkdir(parents=True)
    write_huge_index(memdir / "MEMORY.md", 2 * MAX_INDEX_BYTES)
    (memdir / "user_profile.md").write_text(PROFILE)  # not in the index
    before = os.stat(memdir / "MEMORY.md")
    store = MemoryStore(str(tmp_path / "repo"))
    report = await diagnose(store)
    kinds = [f.kind for f in report.findings]
    assert "index_too_large" in kinds
    assert "missing_from_index" not in kinds  # the unread part may hold the line
    assert await repair(store, report) == []
    after = os.stat(memdir / "MEMORY.md")
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
