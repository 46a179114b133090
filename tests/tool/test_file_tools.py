"""Read / Write / Edit / Glob / Grep behaviour, over LocalBackend and Bubblewrap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mnemoscope.errors import UserError
from mnemoscope.permission import PermissionContext, PermissionMode
from mnemoscope.tool import (
    Edit,
    Glob,
    Grep,
    PathAccess,
    Read,
    ToolContext,
    Write,
    file_tools,
    read_version,
    record_read,
)
from mnemoscope.workspace import LocalBackend, LocalWorkspace, WorkspaceBase


@pytest.fixture
def ctx(file_backend) -> ToolContext:
    perm = PermissionContext(mode=PermissionMode.ACCEPT_EDITS, cwd=file_backend.cwd)
    return ToolContext(permission_context=perm)


async def call(tool, ctx, **kwargs):
    return await tool.call(tool.Input(**kwargs), ctx)


async def test_read_numbers_lines_and_pages(file_backend, ctx):
    p = Path(file_backend.cwd) / "a.md"
    p.write_text("".join(f"line {i}\n" for i in range(1, 11)))
    read = Read(backend=file_backend)
    r = await call(read, ctx, file_path=str(p))
    assert r.output.splitlines()[0] == "     1\tline 1"
    assert r.output.splitlines()[-1] == "    10\tline 10"
    r = await call(read, ctx, file_path=str(p), offset=3, limit=2)
    assert r.output.splitlines() == [
        "     3\tline 3",
        "     4\tline 4",
        "... (6 more lines; call Read with offset=5 to continue)",
    ]
    r = await call(read, ctx, file_path=str(p), offset=50)
    assert r.is_error and "past the end" in r.output


async def test_read_size_cap_binary_empty_directory(file_backend, ctx):
    work = Path(file_backend.cwd)
    (work / "big.txt").write_text("x" * 2500 + "\n")
    r = await call(Read(backend=file_backend, max_bytes=1000), ctx, file_path=str(work / "big.txt"))
    assert r.is_error and "offset and limit" in r.output
    r = await call(
        Read(backend=file_backend, max_bytes=1000), ctx, file_path=str(work / "big.txt"), limit=1
    )
    assert not r.is_error and "chars cut" in r.output  # a line over 2000 chars is cut
    (work / "b.bin").write_bytes(b"\x00\x01\x02")
    r = await call(Read(backend=file_backend), ctx, file_path=str(work / "b.bin"))
    assert r.is_error and "binary" in r.output
    (work / "empty").write_text("")
    r = await call(Read(backend=file_backend), ctx, file_path=str(work / "empty"))
    assert "is empty" in r.output and not r.is_error
    r = await call(Read(backend=file_backend), ctx, file_path=str(work))
    assert r.is_error and "directory" in r.output
    r = await call(Read(backend=file_backend), ctx, file_path=str(work / "missing"))
    assert r.is_error and "Glob" in r.output


async def test_write_requires_read_of_existing_file_and_freshness(file_backend, ctx):
    work = Path(file_backend.cwd)
    read, write = Read(backend=file_backend), Write(backend=file_backend)
    r = await call(write, ctx, file_path=str(work / "new" / "n.md"), content="hello\n")
    assert not r.is_error and r.output.startswith("Created")  # new file: no read needed
    (work / "old.md").write_text("old\n")
    r = await call(write, ctx, file_path=str(work / "old.md"), content="new\n")
    assert r.is_error and "has not been read" in r.output
    await call(read, ctx, file_path=str(work / "old.md"))
    (work / "old.md").write_text("changed by someone else\n")
    r = await call(write, ctx, file_path=str(work / "old.md"), content="new\n")
    assert r.is_error and "Read it again" in r.output
    assert (work / "old.md").read_text() == "changed by someone else\n"
    await call(read, ctx, file_path=str(work / "old.md"))
    r = await call(write, ctx, file_path=str(work / "old.md"), content="new\n")
    assert r.output.startswith("Updated") and (work / "old.md").read_text() == "new\n"
    # the tracked version follows our own writes: a second write needs no new read
    r = await call(write, ctx, file_path=str(work / "old.md"), content="newer\n")
    assert not r.is_error, r.output


async def test_edit_flow_and_errors(file_backend, ctx):
    work = Path(file_backend.cwd)
    p = work / "m.md"
    p.write_bytes(b"- a\r\n- b\r\n- b\r\n")
    read, edit = Read(backend=file_backend), Edit(backend=file_backend)
    r = await call(edit, ctx, file_path=str(p), old_string="- a", new_string="- A")
    assert r.is_error and "Read on it first" in r.output
    await call(read, ctx, file_path=str(p))
    r = await call(edit, ctx, file_path=str(p), old_string="- b", new_string="- B")
    assert r.is_error and "2 times" in r.output and "replace_all" in r.output
    r = await call(edit, ctx, file_path=str(p), old_string="- a\n- b", new_string="- A\n- x")
    assert not r.is_error and "line 1" in r.output, r.output
    r = await call(edit, ctx, file_path=str(p), old_string="- b", new_string="- B")
    assert not r.is_error, r.output  # consecutive edits without re-reading
    assert p.read_bytes() == b"- A\r\n- x\r\n- B\r\n"  # CRLF kept
    r = await call(edit, ctx, file_path=str(p), old_string="- zz", new_string="- y")
    assert r.is_error and "not found" in r.output
    r = await call(edit, ctx, file_path=str(p), old_string="same", new_string="same")
    assert r.is_error and "identical" in r.output
    r = await call(edit, ctx, file_path=str(work / "nope.md"), old_string="x", new_string="y")
    assert r.is_error and "does not exist" in r.output
    r = await call(edit, ctx, file_path=str(work / "created.md"), old_string="", new_string="hi")
    assert not r.is_error and (work / "created.md").read_text() == "hi"


async def test_read_under_one_path_allows_write_under_another(file_backend, ctx):
    work = Path(file_backend.cwd)
    (work / "real.md").write_text("one\n")
    (work / "alias.md").symlink_to(work / "real.md")
    read, write, edit = Read(backend=file_backend), Write(backend=file_backend), Edit(file_backend)
    await call(read, ctx, file_path=str(work / "real.md"))
    r = await call(write, ctx, file_path=str(work / "alias.md"), content="two\n")
    assert not r.is_error, r.output
    assert (work / "real.md").read_text() == "two\n" and (work / "alias.md").is_symlink()
    # and the other way round: read through the link, edit the real path
    await call(read, ctx, file_path=str(work / "alias.md"))
    r = await call(edit, ctx, file_path=str(work / "real.md"), old_string="two", new_string="3")
    assert not r.is_error, r.output
    (work / "real.md").write_text("someone else\n")
    r = await call(write, ctx, file_path=str(work / "alias.md"), content="four\n")
    assert r.is_error and "changed since you last read it" in r.output
    assert (work / "real.md").read_text() == "someone else\n"


async def test_write_onto_a_directory_is_refused(file_backend, ctx):
    (Path(file_backend.cwd) / "d").mkdir()
    r = await call(Write(backend=file_backend), ctx, file_path=file_backend.cwd + "/d", content="x")
    assert r.is_error and "directory" in r.output


async def test_record_read_lets_write_replace_what_was_shown(file_backend, ctx):
    work = Path(file_backend.cwd)
    p = work / "shown.md"
    p.write_text("shown elsewhere\n")
    write = Write(backend=file_backend)
    assert read_version(ctx.state, file_backend, str(p)) is None
    r = await call(write, ctx, file_path=str(p), content="x\n")
    assert r.is_error and "has not been read" in r.output
    content = await file_backend.read_file(str(p))
    record_read(ctx.state, file_backend, content.stat.path, content.stat.version)
    assert read_version(ctx.state, file_backend, content.stat.path) == content.stat.version
    # records are per file namespace: another backend's tools do not see this one
    other = LocalBackend(cwd=file_backend.cwd)
    if other.key != file_backend.key:
        assert read_version(ctx.state, other, content.stat.path) is None
    r = await call(write, ctx, file_path=str(p), content="replaced\n")
    assert not r.is_error and p.read_text() == "replaced\n"
    # the recorded version follows the write; a weak token cannot be recorded
    now = (await file_backend.stat(str(p))).version
    assert read_version(ctx.state, file_backend, str(p)) == now
    weak = (await file_backend.stat(str(p), hash=False)).version
    with pytest.raises(UserError, match="weak token"):
        record_read(ctx.state, file_backend, str(p), weak)


async def test_write_keeps_crlf_of_existing_file(file_backend, ctx):
    p = Path(file_backend.cwd) / "w.txt"
    p.write_bytes(b"x\r\ny\r\n")
    await call(Read(backend=file_backend), ctx, file_path=str(p))
    await call(Write(backend=file_backend), ctx, file_path=str(p), content="1\n2\n")
    assert p.read_bytes() == b"1\r\n2\r\n"


async def test_glob_and_grep_output(file_backend, ctx):
    work = Path(file_backend.cwd)
    (work / "Memory").mkdir()
    (work / "Memory" / "MEMORY.md").write_text("- [User](user.md) lives in Hangzhou\n")
    (work / "Memory" / "user.md").write_text("name: user\nHangzhou\nhangzhou again\n")
    g = await call(Glob(backend=file_backend), ctx, pattern="Memory/*.md")
    assert g.output.splitlines() == [f"{work}/Memory/MEMORY.md", f"{work}/Memory/user.md"]
    g = await call(Glob(backend=file_backend), ctx, pattern=f"{work}/Memory/u*.md")
    assert g.output == f"{work}/Memory/user.md"
    g = await call(Glob(backend=file_backend), ctx, pattern="*.py")
    assert "No files match" in g.output
    grep = Grep(backend=file_backend)
    r = await call(grep, ctx, pattern="Hangzhou")
    assert r.output.splitlines() == [
        f"{work}/Memory/MEMORY.md:1:- [User](user.md) lives in Hangzhou",
        f"{work}/Memory/user.md:2:Hangzhou",
    ]
    r = await call(grep, ctx, pattern="hangzhou", case_insensitive=True, output_mode="count")
    assert r.output.splitlines() == [f"{work}/Memory/MEMORY.md:1", f"{work}/Memory/user.md:2"]
    r = await call(
        grep,
        ctx,
        pattern="hangzhou",
        case_insensitive=True,
        output_mode="files_with_matches",
        head_limit=1,
    )
    assert r.output.splitlines()[0] == f"{work}/Memory/MEMORY.md" and "stopped at 1" in r.output


def test_permission_paths_and_flags(tmp_path):
    b = LocalBackend(cwd=str(tmp_path))
    assert Read(backend=b).permission_paths(Read.Input(file_path="a.md")) == [
        PathAccess(f"{tmp_path}/a.md", "read")
    ]
    assert Write(backend=b).permission_paths(Write.Input(file_path="/x/y", content="")) == [
        PathAccess("/x/y", "write")
    ]
    assert Edit(backend=b).permission_paths(
        Edit.Input(file_path="e", old_string="a", new_string="b")
    ) == [PathAccess(f"{tmp_path}/e", "write")]
    assert Glob(backend=b).permission_paths(Glob.Input(pattern="/etc/**/*.conf")) == [
        PathAccess("/etc", "read")
    ]
    assert Grep(backend=b).permission_paths(Grep.Input(pattern="x")) == [
        PathAccess(str(tmp_path), "read")
    ]
    assert [t.is_read_only for t in (Read(), Write(), Edit(), Glob(), Grep())] == [
        True,
        False,
        False,
        True,
        True,
    ]
    assert isinstance(Read().backend, LocalBackend)


async def test_workspace_list_tools_are_bound_to_its_backend():
    async with LocalWorkspace() as ws:
        tools = await ws.list_tools()
        assert [t.name for t in tools] == ["Read", "Write", "Edit", "Glob", "Grep"]
        assert all(t.backend is ws.get_backend() for t in tools)
        workdir = ws.workdir
        assert Path(workdir).is_dir()  # noqa: ASYNC240
    assert not Path(workdir).exists()  # a temp workdir is removed on close  # noqa: ASYNC240


async def test_file_tools_builds_the_five_over_one_backend(tmp_path: Path) -> None:
    backend = LocalBackend(cwd=str(tmp_path))
    tools = file_tools(backend)
    assert [t.name for t in tools] == ["Read", "Write", "Edit", "Glob", "Grep"]
    assert all(t.backend is backend for t in tools)
    # the default: one LocalBackend for all five, so a Write sees the Read
    default = file_tools()
    assert len({id(t.backend) for t in default}) == 1
    assert isinstance(default[0].backend, LocalBackend)


async def test_a_workspace_without_a_tools_factory_says_how_to_get_tools(monkeypatch) -> None:
    # the workspace layer sits below the tools: importing mnemoscope.tool registers them
    monkeypatch.setattr(WorkspaceBase, "tools_factory", None)
    async with LocalWorkspace() as ws:
        with pytest.raises(UserError, match=r"import mnemoscope\.tool.*file_tools"):
            await ws.list_tools()


def test_importing_the_tool_layer_registers_the_file_tools() -> None:
    code = (
        "import asyncio\n"
        "from mnemoscope.workspace import LocalWorkspace, WorkspaceBase\n"
        "assert WorkspaceBase.tools_factory is None\n"
        "import mnemoscope.tool\n"
        "async def main():\n"
        "    async with LocalWorkspace() as ws:\n"
        "        print(','.join(t.name for t in await ws.list_tools()))\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "Read,Write,Edit,Glob,Grep"
