"""``mnemoscope ltm ls|search|forget|export`` over a store file, as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnemoscope.memory._local_ltm import LocalLongTermMemory

SRC = Path(__file__).resolve().parents[2] / "src"


def ltm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    env.pop("MNEMOSCOPE_LTM_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "mnemoscope.cli", "ltm", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture
async def store_file(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "ltm.db"
    async with LocalLongTermMemory(path) as store:
        ids = {}
        for text in ("Alice lives in Paris.", "Alice plays the cello."):
            ids[text] = (await store.record(text, user_id="alice")).added[0].id
        ids["bob"] = (await store.record("Bob lives in Rome.", user_id="bob")).added[0].id
        await store.update(ids["Alice lives in Paris."], "Alice lives in Lyon.")
    return path, ids


async def test_ls_and_search(store_file: tuple[Path, dict[str, str]]) -> None:
    path, ids = store_file
    listed = ltm("ls", "--db", str(path), "--user", "alice", cwd=path.parent)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2
    assert ids["Alice lives in Paris."] in lines[0] and "Alice lives in Lyon." in lines[0]
    assert "Bob" not in listed.stdout

    found = ltm("search", "where does she live", "--db", str(path), "--user", "alice", "--json",
                cwd=path.parent)  # fmt: skip
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert [h["content"] for h in hits] == ["Alice lives in Lyon."]
    assert hits[0]["score"] > 0

    dense = ltm("search", "x", "--mode", "dense", "--db", str(path), "--user", "alice",
                cwd=path.parent)  # fmt: skip
    assert dense.returncode == 2 and "--embedding local" in dense.stderr


async def test_export_with_history(store_file: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path, _ = store_file
    out = tmp_path / "alice.jsonl"
    done = ltm("export", "--db", str(path), "--user", "alice", "--history", "--out", str(out),
               cwd=path.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["content"] for r in rows] == ["Alice lives in Lyon.", "Alice plays the cello."]
    assert [h["event"] for h in rows[0]["history"]] == ["add", "update"]
    assert rows[0]["history"][1]["old_content"] == "Alice lives in Paris."


async def test_forget_ids_and_a_whole_user(store_file: tuple[Path, dict[str, str]]) -> None:
    path, ids = store_file
    cello = ids["Alice plays the cello."]
    gone = ltm("forget", cello, "--db", str(path), cwd=path.parent)
    assert gone.returncode == 0 and cello in gone.stdout
    again = ltm("forget", cello, "--db", str(path), cwd=path.parent)
    assert again.returncode == 1 and "no memory" in again.stderr

    erased = ltm("forget", "--everything", "--user", "alice", "--db", str(path), cwd=path.parent)
    assert erased.returncode == 0 and "erased 1 memory" in erased.stdout
    async with LocalLongTermMemory(path) as store:
        assert await store.list(user_id="alice", include_superseded=True) == []
        assert [m.content for m in await store.list(user_id="bob")] == ["Bob lives in Rome."]


def test_usage_errors(tmp_path: Path) -> None:
    missing = ltm("ls", "--db", str(tmp_path / "nope.db"), "--user", "a", cwd=tmp_path)
    assert missing.returncode == 2 and "no store" in missing.stderr
    assert not (tmp_path / "nope.db").exists()  # the CLI never creates a store
    (tmp_path / "mnemoscope_ltm.db").touch()  # the default --db, found in the cwd
    no_user = ltm("ls", cwd=tmp_path)
    assert no_user.returncode == 2 and "--user" in no_user.stderr
