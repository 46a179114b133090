"""Crash safety (SIGKILL mid-write), no lost edits across processes, descriptor checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mnemoscope.workspace import LocalBackend, PathDeniedError, _fsops

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from mnemoscope.workspace import LocalBackend

    async def main(root, n_files):
        b = LocalBackend(cwd=root)
        i = 0
        while True:
            for f in range(n_files):
                line = f"generation {i} file {f}\\n"
                await b.write_text(f"{root}/f{f}.md", line * 20000 + "END\\n")
                if i == 0 and f == n_files - 1:
                    print("ready", flush=True)
            i += 1

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


@pytest.mark.slow
def test_sigkill_mid_writes_leaves_old_or_new_never_partial(tmp_path: Path):
    n_files = 8
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(n_files)],
            stdout=subprocess.PIPE,
            env=_env(),
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.05 + 0.1 * round_)  # let it get well into later generations
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for f in range(n_files):
            text = (tmp_path / f"f{f}.md").read_text()
            lines = text.splitlines()
            assert lines[-1] == "END", f"f{f}.md is torn after SIGKILL"
            assert len(lines) == 20001 and len(set(lines[:-1])) == 1, f"f{f}.md mixes versions"
    # leftover temp files are hidden from listings
    listed = {e.name for e in os.scandir(tmp_path)} - {f"f{f}.md" for f in range(n_files)}
    assert all(n.startswith(_fsops.TMP_PREFIX) for n in listed)


EDITOR = textwrap.dedent(
    """
    import asyncio, sys
    from mnemoscope.permission import PermissionContext, PermissionMode
    from mnemoscope.tool import Edit, Read, ToolContext

    async def main(path, worker, slots):
        ctx = ToolContext(permission_context=PermissionContext(
            mode=PermissionMode.ACCEPT_EDITS, cwd=sys.argv[4]))
        read, edit = Read(), Edit()
        retries = 0
        for k in range(slots):
            while True:
                r = await read.call(read.Input(file_path=path), ctx)
                assert not r.is_error, r.output
                e = await edit.call(edit.Input(file_path=path,
                    old_string=f"slot {worker}-{k}: todo",
                    new_string=f"slot {worker}-{k}: done"), ctx)
                if not e.is_error:
                    break
                assert "Read it again" in e.output, e.output
                retries += 1
        print(retries, flush=True)

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    """
)


@pytest.mark.slow
def test_four_processes_editing_one_file_lose_no_edit(tmp_path: Path):
    workers, slots = 4, 15
    path = tmp_path / "MEMORY.md"
    path.write_text("".join(f"slot {w}-{k}: todo\n" for k in range(slots) for w in range(workers)))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", EDITOR, str(path), str(w), str(slots), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
        )
        for w in range(workers)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    text = path.read_text()
    assert "todo" not in text
    assert text.count(": done\n") == workers * slots


def test_concurrent_raw_edits_without_versions_lose_nothing(tmp_path: Path):
    """Edits straight on the backend (no read tracking) are serialised by the lock."""
    script = textwrap.dedent(
        """
        import asyncio, sys
        from mnemoscope.workspace import LocalBackend
        async def main(path, w):
            b = LocalBackend()
            for k in range(25):
                await b.edit(path, f"[{w}-{k}]", f"[{w}-{k} ok]")
        asyncio.run(main(sys.argv[1], sys.argv[2]))
        """
    )
    path = tmp_path / "f.md"
    path.write_text(" ".join(f"[{w}-{k}]" for w in range(4) for k in range(25)))
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(path), str(w)], env=_env())
        for w in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert path.read_text().count(" ok]") == 100


async def test_descriptor_checks_alone_stop_a_swapped_symlink(tmp_path, monkeypatch):
    """Simulate losing the race: the early path check passes, then the open happens on a
    path swapped to a symlink. The checks on the opened descriptors must still refuse."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("s")
    (work / "d").symlink_to(outside)
    (work / "f").symlink_to(outside / "secret")
    monkeypatch.setattr(_fsops, "_precheck", lambda path, roots: None)
    b, roots = LocalBackend(cwd=str(work)), [str(work)]
    for coro in (
        b.read_bytes(str(work / "d" / "secret"), roots=roots),
        b.read_bytes(str(work / "f"), roots=roots),
        b.write_text(str(work / "d" / "new"), "x", roots=roots),
        b.write_text(str(work / "f"), "x", roots=roots),
        b.list(str(work / "d"), roots=roots),
        b.mkdir(str(work / "d" / "sub" / "deeper"), roots=roots),
    ):
        with pytest.raises(PathDeniedError):
            await coro
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "s"
