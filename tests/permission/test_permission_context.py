"""The permission engine, and the seed's permission lines on a real Agent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mnemoscope.agent import Agent
from mnemoscope.permission import (
    AdditionalWorkingDirectory,
    PermissionContext,
    PermissionMode,
    PermissionRequest,
    PermissionRule,
    is_within,
    resolve_path,
)
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import Edit, Read, Toolkit, Write


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cwd, workdir, other = tmp_path / "cwd", tmp_path / "ltm_demo", tmp_path / "other"
    for d in (cwd, workdir, other):
        d.mkdir()
    monkeypatch.chdir(cwd)  # the agent's own working directory defaults to the process's
    return cwd, workdir, other


async def test_seed_permission_lines_let_the_agent_write_into_workdir(dirs):
    _, workdir_path, _ = dirs
    workdir = str(workdir_path)
    target = f"{workdir}/Memory/user_profile.md"
    model = ScriptedChatModel(
        [
            tool_call(
                "Write", file_path=target, content="---\nname: user\n---\nLives in Hangzhou.\n"
            ),
            "Noted.",
        ]
    )
    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
    )
    # the seed's lines, verbatim
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    agent.state.permission_context.working_directories[workdir] = AdditionalWorkingDirectory(
        path=workdir, source="long-term-memory-demo"
    )
    await agent.reply("Remember that I live in Hangzhou.")
    assert Path(target).read_text().endswith("Lives in Hangzhou.\n")  # noqa: ASYNC240


async def test_without_the_seed_lines_the_write_is_refused(dirs):
    _, workdir_path, _ = dirs
    target = f"{workdir_path}/Memory/user_profile.md"
    model = ScriptedChatModel([tool_call("Write", file_path=target, content="x"), "ok"])
    agent = Agent(
        name="a", system_prompt="s", model=model, toolkit=Toolkit(tools=[Read(), Write(), Edit()])
    )
    await agent.reply("Remember this.")
    assert not Path(target).exists()  # noqa: ASYNC240
    result = model.calls[1].messages[-1]
    text = str(result.model_dump())
    assert "outside the working directories" in text


def test_modes(dirs):
    cwd, _, _ = dirs
    inside = str(cwd / "a.md")
    perm = PermissionContext()
    assert perm.cwd == str(cwd)

    def decide(**kw):
        return perm.decide("Write", is_read_only=False, paths=[(inside, "write")], **kw)

    assert decide().behavior == "ask" and "approval" in decide().message
    assert perm.decide("Read", is_read_only=True, paths=[(inside, "read")]).behavior == "allow"
    perm.mode = PermissionMode.ACCEPT_EDITS
    assert decide().behavior == "allow"
    perm.mode = PermissionMode.READ_ONLY
    assert perm.mode is PermissionMode.PLAN
    assert decide().behavior == "deny" and "read-only" in decide().message
    assert perm.decide("send_mail", is_read_only=False).behavior == "deny"
    assert perm.decide("Read", is_read_only=True, paths=[(inside, "read")]).behavior == "allow"
    perm.mode = PermissionMode.BYPASS
    assert perm.decide("Write", is_read_only=False, paths=[("/etc/x", "write")]).behavior == "allow"


def test_outside_is_denied_in_every_mode_but_bypass_reads_too(dirs):
    _, _, other = dirs
    for mode in (PermissionMode.DEFAULT, PermissionMode.ACCEPT_EDITS, PermissionMode.PLAN):
        perm = PermissionContext(mode=mode)
        for access in ("read", "write"):
            d = perm.decide("T", is_read_only=access == "read", paths=[(str(other / "f"), access)])
            assert d.behavior == "deny" and d.reason == "outside_working_dirs", (mode, access)
            assert "working_directories" in d.message
    d = PermissionContext().decide("Read", is_read_only=True, paths=[("~/.ssh/id_rsa", "read")])
    assert d.behavior == "deny"


def test_additional_directory_and_middleware_grant(dirs):
    _, workdir, other = dirs
    perm = PermissionContext(mode=PermissionMode.ACCEPT_EDITS)
    perm.working_directories["mem"] = AdditionalWorkingDirectory(path=str(workdir), source="mw")
    assert (
        perm.decide("Write", is_read_only=False, paths=[(str(workdir / "x.md"), "write")]).behavior
        == "allow"
    )
    assert (
        perm.decide("Write", is_read_only=False, paths=[(str(other / "x.md"), "write")]).behavior
        == "deny"
    )
    assert Path(workdir) in perm.roots() and perm.is_inside(str(workdir / "deep/x"))


def test_rules(dirs):
    cwd, _, other = dirs
    perm = PermissionContext(
        allow_rules=[PermissionRule(tool="Write"), PermissionRule(tool="Read", path=f"{other}/**")],
        deny_rules=[PermissionRule(tool="*", path=f"{cwd}/secrets/**")],
    )
    # path-less allow rule: no ask inside the working directories, still no writes outside
    assert (
        perm.decide("Write", is_read_only=False, paths=[(str(cwd / "a"), "write")]).behavior
        == "allow"
    )
    assert (
        perm.decide("Write", is_read_only=False, paths=[(str(other / "a"), "write")]).behavior
        == "deny"
    )
    # a path rule grants reads of that tree
    assert (
        perm.decide("Read", is_read_only=True, paths=[(str(other / "a"), "read")]).behavior
        == "allow"
    )
    # deny wins, in every mode, and matches case-insensitively
    perm.mode = PermissionMode.BYPASS
    for p in (cwd / "secrets" / "k", cwd / "SECRETS" / "k", cwd / "secrets"):
        d = perm.decide("Read", is_read_only=True, paths=[(str(p), "read")])
        assert d.behavior == "deny" and d.reason == "rule", p


def test_symlinks_dotdot_and_odd_paths_resolve_before_checking(dirs):
    cwd, _, other = dirs
    (cwd / "link").symlink_to(other)
    perm = PermissionContext(mode=PermissionMode.ACCEPT_EDITS)
    for raw in ("link/x", f"{cwd}/link/x", "../other/x", f"{cwd}/sub/../../other/x"):
        assert perm.decide("Write", is_read_only=False, paths=[(raw, "write")]).behavior == "deny"
    for raw, _why in (
        ("a\x00b", "NUL"),
        ("a/" * 2100, "longer than 4096"),
        ("x" * 256, "longer than 255"),
        ("\uff0e\uff0e/other/x", "look-alike"),
        ("..\u2215other", "look-alike"),
        ("\u202efdp.exe", "bidirectional"),
        ("a\nb", "control"),
    ):
        d = perm.decide("Read", is_read_only=True, paths=[(raw, "read")])
        assert d.behavior == "deny" and d.reason == "path", raw
    with pytest.raises(ValueError):
        resolve_path("x\x00", str(cwd))
    assert resolve_path("~", str(cwd)) == Path(os.path.realpath(os.path.expanduser("~")))


def test_special_files_are_denied(dirs):
    cwd, _, _ = dirs
    os.mkfifo(cwd / "pipe")
    perm = PermissionContext(mode=PermissionMode.ACCEPT_EDITS)
    d = perm.decide("Read", is_read_only=True, paths=[(str(cwd / "pipe"), "read")])
    assert d.behavior == "deny" and "FIFO" in d.message
    perm.working_directories["/dev"] = AdditionalWorkingDirectory(path="/dev")
    d = perm.decide("Read", is_read_only=True, paths=[("/dev/zero", "read")])
    assert d.behavior == "deny" and "device file" in d.message


def test_is_within_uses_identity_for_aliases(tmp_path):
    real = tmp_path / "Real"
    real.mkdir()
    assert is_within(real / "a", real)
    assert not is_within(tmp_path / "Realx", real)
    # another spelling of the same directory (here an unresolved alias) counts as inside
    (tmp_path / "alias").symlink_to(real)
    assert is_within(tmp_path / "alias" / "a", real)
    assert not is_within(tmp_path / "a", real)


async def test_ask_callback_receives_a_request(dirs):
    cwd, _, _ = dirs
    seen: list[PermissionRequest] = []

    async def approve(req: PermissionRequest) -> bool:
        seen.append(req)
        return True

    model = ScriptedChatModel([tool_call("Write", file_path=str(cwd / "n.md"), content="x"), "ok"])
    agent = Agent(name="a", system_prompt="s", model=model, toolkit=Toolkit(tools=[Write()]))
    agent.state.permission_context.ask_callback = approve
    await agent.reply("write it")
    assert (cwd / "n.md").read_text() == "x"
    assert seen and seen[0].tool_name == "Write" and seen[0].paths == [str(cwd / "n.md")]
