"""Escape attempts through Read/Write/Edit/Glob/Grep, on LocalBackend and Bubblewrap.

Two layers are tested separately:

* ``engine``: what an agent does -- the permission engine decides, then the tool runs.
  Every attempt must be refused with a clear message.
* ``backend``: the engine is skipped (as if it had a bug); the tool still passes the
  working directories to the backend, which must not read or change anything outside.

Afterwards nothing outside the working directory may have been read (the secret never
appears in an output) or changed (a snapshot of the outside tree is compared).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from mnemoscope.permission import PermissionContext, PermissionMode
from mnemoscope.tool import Edit, Glob, Grep, Read, ToolContext, ToolResult, Write
from mnemoscope.workspace import BackendBase

SECRET = "TOP-SECRET-7f3a9c"
DENIAL = re.compile(
    r"outside the (?:working|allowed) directories|denied|refused|not a regular file"
    r"|NUL byte|longer than|look-alike|imitates"
    r"|control or bidi|must be relative|device file|FIFO",
    re.IGNORECASE,
)


@dataclass
class Attempt:
    id: str
    tool: str
    input: dict
    after_check: Callable[[Path, Path], None] | None = None  # swap done after the decision


def _swap_file_to_link(name: str) -> Callable[[Path, Path], None]:
    def swap(work: Path, outside: Path) -> None:
        (work / name).unlink()
        (work / name).symlink_to(outside / "secret.txt")

    return swap


def _swap_dir_to_link(name: str) -> Callable[[Path, Path], None]:
    def swap(work: Path, outside: Path) -> None:
        shutil.rmtree(work / name)
        (work / name).symlink_to(outside)

    return swap


def attempts(work: str, out: str, home: str) -> list[Attempt]:
    s = f"{out}/secret.txt"
    rel_out = os.path.relpath(out, work)
    return [
        # ---- Read
        Attempt("read-relative-traversal", "Read", {"file_path": f"{rel_out}/secret.txt"}),
        Attempt("read-absolute-dotdot", "Read", {"file_path": f"{work}/../outside/secret.txt"}),
        Attempt("read-absolute", "Read", {"file_path": s}),
        Attempt("read-tilde-ssh-key", "Read", {"file_path": "~/.ssh/id_rsa"}),
        Attempt("read-symlink-out", "Read", {"file_path": f"{work}/link_out"}),
        Attempt("read-symlinked-dir", "Read", {"file_path": f"{work}/linkdir_out/secret.txt"}),
        Attempt("read-symlink-chain", "Read", {"file_path": f"{work}/chain1"}),
        Attempt("read-dev-zero", "Read", {"file_path": "/dev/zero"}),
        Attempt("read-symlink-to-device", "Read", {"file_path": f"{work}/devlink"}),
        Attempt("read-fifo-inside", "Read", {"file_path": f"{work}/fifo"}),
        Attempt("read-long-component", "Read", {"file_path": f"{work}/{'a' * 300}"}),
        Attempt("read-very-long-path", "Read", {"file_path": work + "/a" * 2100}),
        Attempt("read-nul-byte", "Read", {"file_path": f"{work}/x\x00/../../outside/secret.txt"}),
        Attempt("read-proc-root-magic-link", "Read", {"file_path": f"/proc/self/root{s}"}),
        Attempt(
            "read-fullwidth-dots", "Read", {"file_path": f"{work}/\uff0e\uff0e/outside/secret.txt"}
        ),
        Attempt(
            "read-division-slash", "Read", {"file_path": f"{work}/..\u2215outside\u2215secret.txt"}
        ),
        Attempt("read-bidi-override", "Read", {"file_path": f"{work}/\u202etxt.terces"}),
        Attempt(
            "read-case-variant", "Read", {"file_path": f"{work}/../OUTSIDE/../outside/secret.txt"}
        ),
        Attempt("read-etc-passwd", "Read", {"file_path": "/etc/passwd"}),
        # ---- Write
        Attempt("write-absolute-outside", "Write", {"file_path": f"{out}/new.txt", "content": "x"}),
        Attempt(
            "write-dotdot", "Write", {"file_path": f"{work}/../outside/secret.txt", "content": "x"}
        ),
        Attempt(
            "write-through-symlink", "Write", {"file_path": f"{work}/link_out", "content": "x"}
        ),
        Attempt(
            "write-into-symlinked-dir",
            "Write",
            {"file_path": f"{work}/linkdir_out/new.txt", "content": "x"},
        ),
        Attempt(
            "write-dangling-symlink-out",
            "Write",
            {"file_path": f"{work}/dangling_out", "content": "x"},
        ),
        Attempt("write-tilde", "Write", {"file_path": "~/.bashrc_mnemo", "content": "x"}),
        Attempt("write-dev-null", "Write", {"file_path": "/dev/null", "content": "x"}),
        Attempt(
            "write-mkdir-parents-through-link",
            "Write",
            {"file_path": f"{work}/linkdir_out/deep/new.txt", "content": "x"},
        ),
        # ---- Edit
        Attempt(
            "edit-absolute-outside",
            "Edit",
            {"file_path": s, "old_string": SECRET, "new_string": "pwned"},
        ),
        Attempt(
            "edit-symlink-out",
            "Edit",
            {"file_path": f"{work}/link_out", "old_string": SECRET, "new_string": "pwned"},
        ),
        Attempt(
            "edit-symlinked-dir",
            "Edit",
            {
                "file_path": f"{work}/linkdir_out/secret.txt",
                "old_string": SECRET,
                "new_string": "pwned",
            },
        ),
        # ---- Glob
        Attempt("glob-dotdot-pattern", "Glob", {"pattern": "../outside/*"}),
        Attempt("glob-absolute-pattern", "Glob", {"pattern": f"{out}/**"}),
        Attempt("glob-outside-path", "Glob", {"pattern": "**/*", "path": out}),
        Attempt("glob-symlinked-dir", "Glob", {"pattern": "*", "path": f"{work}/linkdir_out"}),
        # ---- Grep
        Attempt("grep-outside-path", "Grep", {"pattern": "SECRET", "path": out}),
        Attempt("grep-symlink-out", "Grep", {"pattern": "SECRET", "path": f"{work}/link_out"}),
        Attempt("grep-home", "Grep", {"pattern": "SECRET", "path": "~"}),
        Attempt("grep-dotdot-glob", "Grep", {"pattern": "SECRET", "glob": "../outside/*"}),
        Attempt("grep-dev-zero", "Grep", {"pattern": "x", "path": "/dev/zero"}),
        # ---- symlink swapped after the permission check (TOCTOU)
        Attempt(
            "toctou-read",
            "Read",
            {"file_path": f"{work}/swap_read.txt"},
            _swap_file_to_link("swap_read.txt"),
        ),
        Attempt(
            "toctou-edit",
            "Edit",
            {"file_path": f"{work}/swap_edit.txt", "old_string": SECRET, "new_string": "p"},
            _swap_file_to_link("swap_edit.txt"),
        ),
        Attempt(
            "toctou-write-dir",
            "Write",
            {"file_path": f"{work}/swapdir_w/new.txt", "content": "x"},
            _swap_dir_to_link("swapdir_w"),
        ),
        Attempt(
            "toctou-grep-dir",
            "Grep",
            {"pattern": "SECRET", "path": f"{work}/swapdir_g"},
            _swap_dir_to_link("swapdir_g"),
        ),
        Attempt(
            "toctou-glob-dir",
            "Glob",
            {"pattern": "*", "path": f"{work}/swapdir_l"},
            _swap_dir_to_link("swapdir_l"),
        ),
    ]


ATTEMPT_IDS = [a.id for a in attempts("/w", "/o", "/h")]
TOOLS = {"Read": Read, "Write": Write, "Edit": Edit, "Glob": Glob, "Grep": Grep}


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_backend: BackendBase):
    work = tmp_path / "work"
    outside = tmp_path / "outside"
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN KEY----- {SECRET}\n")
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET}\n")
    monkeypatch.setenv("HOME", str(home))
    file_backend.home = str(home)  # what "~" means to the tools
    (work / "link_out").symlink_to(outside / "secret.txt")
    (work / "linkdir_out").symlink_to(outside)
    (work / "chain2").symlink_to(outside / "secret.txt")
    (work / "chain1").symlink_to(work / "chain2")
    (work / "devlink").symlink_to("/dev/zero")
    (work / "dangling_out").symlink_to(outside / "created_by_attack.txt")
    os.mkfifo(work / "fifo")
    for name in ("swap_read.txt", "swap_edit.txt"):
        (work / name).write_text(f"harmless {SECRET[:3]}\n")
    for name in ("swapdir_w", "swapdir_g", "swapdir_l"):
        (work / name).mkdir()
        (work / name / "ok.txt").write_text("ok\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    perm = PermissionContext(mode=PermissionMode.ACCEPT_EDITS, cwd=str(work))
    before = {**_snapshot(outside), **_snapshot(home)}
    yield work, outside, home, perm
    after = {**_snapshot(outside), **_snapshot(home)}
    assert after == before, "something outside the working directory changed"


async def _run(
    tool,
    args: dict,
    perm: PermissionContext,
    ctx: ToolContext,
    *,
    engine: bool,
    after_check=None,
    work=None,
    outside=None,
) -> ToolResult:
    tool_input = tool.Input.model_validate(args)
    if engine:
        decision = perm.decide(
            tool.name,
            is_read_only=tool.is_read_only,
            auto_allow=tool.auto_allow,
            paths=[(pa.path, pa.access) for pa in tool.permission_paths(tool_input)],
        )
        if decision.behavior != "allow":
            return ToolResult.error(f"Permission denied: {decision.message}")
    if after_check is not None:
        after_check(work, outside)
    return await tool.call(tool_input, ctx)


@pytest.mark.parametrize("layer", ["engine", "backend"])
@pytest.mark.parametrize("attempt_id", ATTEMPT_IDS)
async def test_escape_attempt_is_refused(world, file_backend, attempt_id: str, layer: str):
    work, outside, home, perm = world
    attempt = {a.id: a for a in attempts(str(work), str(outside), str(home))}[attempt_id]
    if attempt.after_check is not None and layer == "backend":
        pytest.skip("a swap after the check is only meaningful with the engine in front")
    tool = TOOLS[attempt.tool](backend=file_backend)
    ctx = ToolContext(permission_context=perm)
    # a file must have been read before it is overwritten: read the decoy first
    if attempt.tool == "Edit" and attempt.after_check is not None:
        pre = await Read(backend=file_backend).call(
            Read.Input(file_path=attempt.input["file_path"]), ctx
        )
        assert not pre.is_error, pre.output
    result = await _run(
        tool,
        attempt.input,
        perm,
        ctx,
        engine=layer == "engine",
        after_check=attempt.after_check,
        work=work,
        outside=outside,
    )
    text = result.output if isinstance(result.output, str) else str(result.output)
    assert SECRET not in text, f"secret leaked: {text}"
    if layer == "engine":
        assert result.is_error, f"{attempt_id} was not refused: {text}"
        assert DENIAL.search(text), f"{attempt_id}: unclear refusal: {text}"
    else:
        # without the engine, the backend confines: an error, or a harmless miss inside
        if attempt.tool in ("Read", "Write", "Edit"):
            assert result.is_error, f"{attempt_id} went through: {text}"
    assert not (outside / "created_by_attack.txt").exists()
    assert not (outside / "new.txt").exists()


def test_at_least_thirty_attempts():
    assert len(ATTEMPT_IDS) >= 30
    assert len(set(ATTEMPT_IDS)) == len(ATTEMPT_IDS)
    assert {a.tool for a in attempts("/w", "/o", "/h")} == set(TOOLS)


async def test_glob_and_grep_of_workdir_do_not_follow_links_out(world, file_backend):
    _, _, _, perm = world
    ctx = ToolContext(permission_context=perm)
    g = await Glob(backend=file_backend).call(Glob.Input(pattern="**/*"), ctx)
    assert not g.is_error, g.output
    assert "swapdir_w/ok.txt" in g.output  # it does list what is inside
    assert "secret.txt" not in g.output and "link_out" not in g.output
    r = await Grep(backend=file_backend).call(Grep.Input(pattern="SECRET|harmless"), ctx)
    assert "harmless" in r.output and SECRET not in r.output


async def test_bypass_mode_still_refuses_device_files(world, file_backend):
    _, _, _, perm = world
    perm.mode = PermissionMode.BYPASS
    ctx = ToolContext(permission_context=perm)
    res = await Read(backend=file_backend).call(Read.Input(file_path="/dev/zero"), ctx)
    assert res.is_error and "not a regular file" in res.output
