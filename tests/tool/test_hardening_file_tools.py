"""Hardening of the file tools (issue 10, items 3, 4, 21 and 22).

* Glob and Grep drop every path the engine refuses (deny rules, secret locations);
* an allow rule outside the working directories works end to end, and the backend is
  confined to exactly what it grants;
* relative paths and a missing Glob/Grep path resolve against ``PermissionContext.cwd``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemoscope.agent import Agent
from mnemoscope.permission import (
    AdditionalWorkingDirectory,
    PermissionContext,
    PermissionMode,
    PermissionRule,
)
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import Edit, Glob, Grep, Read, ToolContext, Toolkit, Write
from mnemoscope.workspace import LocalBackend

SECRET = "TOPSECRET-b0a7"


def _tool_results(model: ScriptedChatModel) -> list[str]:
    """The text of every tool result the model was sent, in order."""
    out: list[str] = []
    for call in model.calls[1:]:
        out.append(str(call.messages[-1].model_dump()))
    return out


async def _check_and_call(tool, ctx: ToolContext, **kwargs):
    """What the agent's acting phase does: the tool's own decision, then the call."""
    tool_input = tool.Input(**kwargs)
    decision = await tool.check_permissions(tool_input, ctx)
    assert decision is not None
    if decision.behavior != "allow":
        return decision
    return await tool.call(tool_input, ctx)


# ------------------------------------------------------------- item 3: Glob / Grep
@pytest.fixture
def tree(file_backend) -> Path:
    work = Path(file_backend.cwd)
    for rel, text in {
        "notes.md": "plain TOPSECRET-b0a7? no: harmless line\n",
        "secrets/key.txt": f"{SECRET} key\n",
        "secrets/deep/token": f"{SECRET} token\n",
        ".env": f"API_KEY={SECRET}\n",
        "app/.env": f"DB={SECRET}\n",
        "app/main.py": "print('hello')\n",
    }.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    return work


@pytest.fixture
def deny_ctx(file_backend) -> ToolContext:
    perm = PermissionContext(
        mode=PermissionMode.ACCEPT_EDITS,
        cwd=file_backend.cwd,
        deny_rules=[PermissionRule(path="secrets/**"), PermissionRule(path="**/.env")],
    )
    return ToolContext(permission_context=perm)


async def test_grep_on_the_parent_returns_no_lines_of_denied_files(file_backend, tree, deny_ctx):
    grep = Grep(backend=file_backend)
    for kwargs in (
        {"pattern": "b0a7"},
        {"pattern": "b0a7", "path": str(tree)},
        {"pattern": "b0a7", "output_mode": "files_with_matches"},
        {"pattern": "b0a7", "output_mode": "count"},
        {"pattern": "b0a7", "glob": "*"},
    ):
        res = await _check_and_call(grep, deny_ctx, **kwargs)
        assert not res.is_error, res
        assert "secrets/" not in res.output and ".env" not in res.output, (kwargs, res.output)
        assert "key" not in res.output and "API_KEY" not in res.output
        assert "notes.md" in res.output
        assert res.metadata["left_out"] == 4
        assert "4 files left out" in res.output
    res = await _check_and_call(grep, deny_ctx, pattern="API_KEY|DB=")
    assert "No matches" in res.output and "2 files left out" in res.output


async def test_grep_names_skipped_files_but_not_denied_ones(file_backend, tree, deny_ctx):
    (tree / "secrets" / "blob.bin").write_bytes(b"\x00\x01" * 100)
    (tree / "data.bin").write_bytes(b"\x00\x01" * 100)
    res = await _check_and_call(Grep(backend=file_backend), deny_ctx, pattern="b0a7")
    assert "data.bin" in res.output and "not searched" in res.output
    assert "blob.bin" not in res.output and "5 files left out" in res.output


async def test_glob_does_not_list_denied_files(file_backend, tree, deny_ctx):
    glob = Glob(backend=file_backend)
    for pattern in ("**/*", "**", "secrets/*", "**/.env", f"{tree}/**/*"):
        res = await _check_and_call(glob, deny_ctx, pattern=pattern)
        assert not res.is_error, res
        listed = res.output.splitlines()
        assert not [p for p in listed if "/secrets/" in p or p.endswith("/.env")], listed
        assert "left out" in res.output
    res = await _check_and_call(glob, deny_ctx, pattern="**/*")
    assert "notes.md" in res.output and "app/main.py" in res.output
    assert res.metadata["left_out"] == 4 and "4 paths left out" in res.output


async def test_read_and_a_search_inside_a_denied_directory_stay_denied(
    file_backend, tree, deny_ctx
):
    for tool, kwargs in (
        (Read(backend=file_backend), {"file_path": "secrets/key.txt"}),
        (Read(backend=file_backend), {"file_path": str(tree / "app" / ".env")}),
        (Grep(backend=file_backend), {"pattern": "b0a7", "path": "secrets"}),
        (Glob(backend=file_backend), {"pattern": "*", "path": str(tree / "secrets")}),
    ):
        decision = await _check_and_call(tool, deny_ctx, **kwargs)
        assert decision.behavior == "deny" and decision.reason == "rule", kwargs


async def test_glob_refills_when_denied_paths_take_the_limit(file_backend, deny_ctx):
    work = Path(file_backend.cwd)
    (work / "secrets").mkdir()
    for i in range(8):
        (work / "secrets" / f"s{i}").write_text("x\n")
    (work / "z.md").write_text("x\n")
    res = await _check_and_call(Glob(backend=file_backend, limit=3), deny_ctx, pattern="**/*")
    assert res.output.splitlines()[0] == str(work / "z.md")
    assert "secrets" not in res.output


async def test_glob_and_grep_of_home_drop_secret_locations_even_in_bypass(
    file_backend, tmp_path, monkeypatch: pytest.MonkeyPatch
):
    home = Path(file_backend.cwd)  # the backend's directory plays the home directory
    monkeypatch.setenv("HOME", str(home))
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text(f"{SECRET}\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(f"{SECRET}\n")
    (home / "todo.md").write_text(f"{SECRET[:9]} not the secret\n")
    perm = PermissionContext(mode=PermissionMode.BYPASS, cwd=str(home))
    ctx = ToolContext(permission_context=perm)
    res = await _check_and_call(Grep(backend=file_backend), ctx, pattern="TOPSECRET")
    assert SECRET not in res.output and "todo.md" in res.output
    assert "2 files left out" in res.output
    res = await _check_and_call(Glob(backend=file_backend), ctx, pattern="**/*")
    assert ".ssh" not in res.output and ".aws" not in res.output and "todo.md" in res.output
    res = await _check_and_call(Read(backend=file_backend), ctx, file_path="~/.ssh/id_rsa")
    assert res.behavior == "deny" and res.reason == "secret"


async def test_agent_grep_and_glob_filter_denied_paths(tree, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    model = ScriptedChatModel(
        [
            tool_call("Grep", pattern="b0a7", path=str(tree)),
            tool_call("Glob", pattern="**/*", path=str(tree)),
            tool_call("Read", file_path=str(tree / "secrets" / "key.txt")),
            "done",
        ]
    )
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(tools=[Read(), Glob(), Grep()]),
    )
    perm = agent.state.permission_context
    perm.working_directories[str(tree)] = AdditionalWorkingDirectory(path=str(tree))
    perm.deny_rules = [PermissionRule(path="secrets/**"), PermissionRule(path="**/.env")]
    await agent.reply("look around")
    grep_out, glob_out, read_out = _tool_results(model)
    for out in (grep_out, glob_out):
        assert "notes.md" in out and "key.txt" not in out and ".env" not in out
        assert "left out" in out
    assert "Permission denied" in read_out and SECRET not in read_out


# ------------------------------------------- item 21: allow rules outside the roots
@pytest.fixture
def outside(tmp_path: Path) -> tuple[Path, Path, Path]:
    work, granted, sibling = tmp_path / "work", tmp_path / "x", tmp_path / "y"
    for d in (work, granted, sibling):
        d.mkdir()
    (granted / "a.md").write_text("granted file\n")
    (sibling / "secret.txt").write_text(f"{SECRET}\n")
    return work, granted, sibling


async def test_an_allow_rule_outside_the_working_directories_works_through_the_agent(
    outside, monkeypatch
):
    work, granted, sibling = outside
    monkeypatch.chdir(work)
    model = ScriptedChatModel(
        [
            tool_call("Read", file_path=str(granted / "a.md")),
            tool_call(
                "Edit", file_path=str(granted / "a.md"), old_string="granted", new_string="ok"
            ),
            tool_call("Write", file_path=str(granted / "new" / "b.md"), content="new\n"),
            tool_call("Glob", pattern="**/*.md", path=str(granted)),
            tool_call("Grep", pattern="ok|new", path=str(granted)),
            tool_call("Read", file_path=str(sibling / "secret.txt")),
            "done",
        ]
    )
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit(), Glob(), Grep()]),
    )
    perm = agent.state.permission_context
    perm.mode = PermissionMode.ACCEPT_EDITS
    perm.allow_rules = [PermissionRule(tool="*", path=f"{granted}/**")]
    await agent.reply("go")
    read, edit, write, glob, grep, sibling_read = _tool_results(model)
    assert "granted file" in read
    assert "Edited" in edit and (granted / "a.md").read_text() == "ok file\n"
    assert "Created" in write and (granted / "new" / "b.md").read_text() == "new\n"
    assert "a.md" in glob and "b.md" in glob
    assert "ok file" in grep and "new" in grep
    assert "Permission denied" in sibling_read and SECRET not in sibling_read


async def test_the_backend_gets_only_what_the_rule_grants(outside):
    """A swap after the check (a.md becomes a link to the sibling) is refused by the
    backend: it was given the granted directory, not its parent."""
    work, granted, sibling = outside
    perm = PermissionContext(
        mode=PermissionMode.ACCEPT_EDITS,
        cwd=str(work),
        allow_rules=[PermissionRule(tool="*", path=f"{granted}/**")],
    )
    ctx = ToolContext(permission_context=perm)
    backend = LocalBackend(cwd=str(work))
    read = Read(backend=backend)
    tool_input = read.Input(file_path=str(granted / "a.md"))
    decision = await read.check_permissions(tool_input, ctx)
    assert decision is not None and decision.behavior == "allow"
    (granted / "a.md").unlink()
    (granted / "a.md").symlink_to(sibling / "secret.txt")
    res = await read.call(tool_input, ctx)
    assert res.is_error and "outside the allowed directories" in res.output
    assert SECRET not in res.output
    # and a sibling path given to the tool directly is refused by the backend too
    res = await read.call(read.Input(file_path=str(sibling / "secret.txt")), ctx)
    assert res.is_error and SECRET not in res.output


# --------------------------------------- item 22: relative paths against perm.cwd
async def test_relative_paths_resolve_against_the_permission_cwd(tmp_path, monkeypatch):
    workdir, elsewhere = tmp_path / "workdir", tmp_path / "elsewhere"
    workdir.mkdir()
    elsewhere.mkdir()
    (workdir / "notes.md").write_text("hello from workdir\n")
    (elsewhere / "notes.md").write_text("wrong file\n")
    monkeypatch.chdir(elsewhere)  # the default LocalBackend's cwd
    model = ScriptedChatModel(
        [
            tool_call("Read", file_path="notes.md"),
            tool_call("Edit", file_path="notes.md", old_string="hello", new_string="hi"),
            tool_call("Write", file_path="sub/new.md", content="x\n"),
            tool_call("Glob", pattern="**/*.md"),
            tool_call("Grep", pattern="hi from"),
            "done",
        ]
    )
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit(), Glob(), Grep()]),
    )
    agent.state.permission_context = PermissionContext(
        mode=PermissionMode.ACCEPT_EDITS, cwd=str(workdir)
    )
    await agent.reply("go")
    read, edit, write, glob, grep = _tool_results(model)
    assert "hello from workdir" in read and "Created" in write
    assert "Edited" in edit and (workdir / "notes.md").read_text() == "hi from workdir\n"
    assert (workdir / "sub" / "new.md").read_text() == "x\n"
    assert not (elsewhere / "sub").exists()
    assert (elsewhere / "notes.md").read_text() == "wrong file\n"
    assert str(workdir / "notes.md") in glob and str(workdir / "sub" / "new.md") in glob
    assert str(elsewhere) not in glob
    assert f"{workdir / 'notes.md'}:1:hi from workdir" in grep


async def test_without_a_permission_context_the_backend_cwd_is_used(tmp_path):
    (tmp_path / "n.md").write_text("backend cwd\n")
    read = Read(backend=LocalBackend(cwd=str(tmp_path)))
    res = await read.call(read.Input(file_path="n.md"), ToolContext())
    assert "backend cwd" in res.output


@pytest.mark.parametrize("where", ["root", "home"])
async def test_an_agent_started_in_root_or_home_has_no_implicit_file_access(
    tmp_path, monkeypatch: pytest.MonkeyPatch, where: str
):
    home = tmp_path / "home" / "bob"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(f"{SECRET}\n")
    (home / "notes.md").write_text("bob's notes\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir("/" if where == "root" else home)
    target = (tmp_path if where == "root" else home) / "evil.txt"
    model = ScriptedChatModel(
        [
            tool_call("Read", file_path="~/.ssh/id_rsa"),
            tool_call("Read", file_path=str(home / "notes.md")),
            tool_call("Glob", pattern="**/id_rsa"),
            # a target in the temporary directory: on the old code this write succeeded
            tool_call("Write", file_path=str(target), content="written\n"),
            "done",
        ]
    )
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Glob()]),
    )
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    await agent.reply("go")
    results = _tool_results(model)
    assert all("Permission denied" in r for r in results), results
    assert not any(SECRET in r or "bob's notes" in r for r in results)
    assert not target.exists()


async def test_read_splits_lines_like_edit_and_grep(tmp_path):
    """Item 22: only \\n, \\r\\n and \\r end a line; a form feed stays inside its line."""
    (tmp_path / "f.txt").write_bytes(b"a\x0cb\nc\n")
    read = Read(backend=LocalBackend(cwd=str(tmp_path)))
    res = await read.call(read.Input(file_path="f.txt"), ToolContext())
    lines = [line for line in res.output.split("\n") if "\t" in line]
    assert lines == ["     1\ta\x0cb", "     2\tc"]
