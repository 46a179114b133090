"""The ``mnemoscope`` command as a newcomer meets it (issue 10, items 23-27).

Every test runs the command in a subprocess, as a user would, with a timeout.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnemoscope import __version__
from mnemoscope.memory import LocalLongTermMemory
from mnemoscope.memory.markdown._files import render_memory_file
from mnemoscope.testing import HashEmbeddingModel

CLEAN_ENV = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("MNEMOSCOPE_", "OPENAI_", "DASHSCOPE_", "ANTHROPIC_"))
}


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, module: str = "mnemoscope.cli"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env=env or CLEAN_ENV,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], command: str) -> str:
    """The single error line of a failed command (no traceback), exit status 2."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"mnemoscope {command}: error: "), lines[0]
    return lines[0]


def files(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


async def _fill(path: Path, embedder: HashEmbeddingModel | None = None) -> dict[str, str]:
    async with LocalLongTermMemory(path, embedding_model=embedder) as store:
        alice = await store.record(
            ["Alice lives in Lyon.", "Alice plays the cello."], user_id="alice"
        )
        bob = await store.record("Bob lives in Rome.", user_id="bob")
    return {"alice": alice.added[0].id, "cello": alice.added[1].id, "bob": bob.added[0].id}


@pytest.fixture
async def store(tmp_path: Path) -> Path:
    path = tmp_path / "store" / "ltm.db"
    path.parent.mkdir()
    await _fill(path)
    return path


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    memdir = tmp_path / "work" / "Memory"
    memdir.mkdir(parents=True)
    (memdir / "user_profile.md").write_text(
        render_memory_file("User profile", "Where the user lives", "user", "Hangzhou.")
    )
    (memdir / "MEMORY.md").write_text("- [User profile](user_profile.md) — where the user lives\n")
    return tmp_path / "work"


# ---------------------------------------------------------------- 23: read-only inspection
def test_inspecting_a_chat_session_database_changes_nothing(tmp_path: Path) -> None:
    # the chat session is written by another process, as `mnemoscope chat --session-db` does
    script = (
        "import asyncio, sys\n"
        "from mnemoscope.memory import AsyncSQLAlchemyMemory\n"
        "from mnemoscope.message import UserMsg\n"
        "async def main():\n"
        "    s = AsyncSQLAlchemyMemory(f'sqlite+aiosqlite:///{sys.argv[1]}', session_id='s')\n"
        "    await s.add(UserMsg('a', 'hello'))\n"
        "    await s.aclose()\n"
        "asyncio.run(main())\n"
    )
    chat = tmp_path / "chat.db"
    made = subprocess.run(
        [sys.executable, "-c", script, str(chat)], capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stderr
    (tmp_path / "empty.db").touch()
    before = files(tmp_path)
    for name in ("chat.db", "empty.db"):
        for args in (
            ("ls", "--db", name, "--user", "a"),
            ("ls", name, "--user", "a"),
            ("search", name, "hello", "--user", "a"),
            ("users", name),
            ("export", name, "--user", "a"),
            ("forget", name, "--user", "a", "--everything"),
        ):
            proc = cli("ltm", *args, cwd=tmp_path)
            line = one_line_error(proc, f"ltm {args[0]}")
            assert f"no long-term store in '{name}'" in line
    assert files(tmp_path) == before  # byte for byte; no table, journal or -wal added


async def test_inspecting_a_store_leaves_it_byte_identical(store: Path) -> None:
    before = files(store.parent)
    for args in (
        ("ls", str(store), "--user", "alice"),
        ("search", str(store), "cello", "--user", "alice"),
        ("users", str(store)),
        ("export", str(store), "--user", "alice", "--history"),
    ):
        proc = cli("ltm", *args, cwd=store.parent)
        assert proc.returncode == 0, proc.stderr
    assert files(store.parent) == before


# ---------------------------------------------------------------- 24: one-line errors
def test_a_file_that_is_not_sqlite_is_one_line_and_debug_shows_the_traceback(
    tmp_path: Path,
) -> None:
    text = tmp_path / "notsqlite.txt"
    text.write_text("just some notes\n" * 10)
    before = text.read_bytes()
    proc = cli("ltm", "search", "notes", "--db", str(text), "--user", "a", cwd=tmp_path)
    line = one_line_error(proc, "ltm search")
    assert "is not a SQLite database" in line and str(text) in line
    debug = cli("ltm", "search", "notes", "--db", str(text), "--user", "a", "--debug",
                cwd=tmp_path)  # fmt: skip
    assert debug.returncode != 0 and "Traceback" in debug.stderr
    assert "MemoryStoreError" in debug.stderr
    assert text.read_bytes() == before


async def test_a_store_of_another_embedder_names_reembed_before_loading_a_model(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hashed.db"
    await _fill(path, HashEmbeddingModel(64, model="hash-64"))
    proc = cli("ltm", "search", str(path), "cello", "--user", "alice", "--embedding", "local",
               cwd=tmp_path)  # fmt: skip
    line = one_line_error(proc, "ltm search")
    assert "'hash-64'" in line and "all-MiniLM-L6-v2" in line
    assert f"mnemoscope ltm reembed {path} --embedding local" in line
    assert "loading" not in proc.stderr  # the fix is named before any model is loaded

    again = cli("ltm", "reembed", str(path), "--embedding", "hash", "--batch-size", "2",
                cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "re-embedding 3 memories with hash-embedding" in again.stderr  # progress
    assert "2/3" in again.stderr and "3/3" in again.stderr
    assert "re-embedded 3 memories" in again.stdout
    found = cli("ltm", "search", str(path), "cello", "--user", "alice", "--embedding", "hash",
                "--json", cwd=tmp_path)  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)[0]["content"] == "Alice plays the cello."


def _core_install(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment where ``modules`` cannot be imported, as on a core install."""
    shadow = tmp_path / "core-install"
    for module in modules:
        pkg = shadow / module
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
        )
    return {**CLEAN_ENV, "PYTHONPATH": os.pathsep.join([str(shadow), *sys.path])}


def test_chat_session_db_on_a_core_install_is_one_line(tmp_path: Path) -> None:
    env = {
        **_core_install(tmp_path, "sqlalchemy"),
        "MNEMOSCOPE_MODEL": "m",
        "MNEMOSCOPE_BASE_URL": "http://127.0.0.1:9/v1",  # never reached
    }
    proc = cli("chat", "--session-db", str(tmp_path / "s.db"), cwd=tmp_path, env=env)
    line = one_line_error(proc, "chat")
    assert "pip install 'mnemoscope[sql]'" in line
    assert not (tmp_path / "s.db").exists()


async def test_embedding_local_on_a_core_install_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "minilm.db"  # a store whose vectors claim to be MiniLM's
    await _fill(path, HashEmbeddingModel(384, model="all-MiniLM-L6-v2"))
    # every runtime a local embedder may use (onnxruntime, or sentence-transformers + torch)
    env = _core_install(tmp_path, "onnxruntime", "sentence_transformers", "torch")
    proc = cli("ltm", "search", str(path), "cello", "--user", "alice", "--embedding", "local",
               cwd=tmp_path, env=env)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("mnemoscope ltm search: error: ")
    assert "pip install 'mnemoscope[local" in last  # the 'local' (or 'local-torch') extra


# ---------------------------------------------------------------- 25: positional paths
async def test_store_paths_are_accepted_positionally(store: Path, tmp_path: Path) -> None:
    async with LocalLongTermMemory(store) as s:
        cello = next(m.id for m in await s.list(user_id="alice") if "cello" in m.content)
    cwd = tmp_path
    ls = cli("ltm", "ls", str(store), "--user", "alice", cwd=cwd)
    assert ls.returncode == 0 and "Alice lives in Lyon." in ls.stdout, ls.stderr
    for args in (
        ("search", str(store), "where does she live", "--user", "alice"),
        ("search", "where does she live", str(store), "--user", "alice"),
        ("search", "where does she live", "--db", str(store), "--user", "alice"),
    ):
        proc = cli("ltm", *args, cwd=cwd)
        assert proc.returncode == 0 and "Alice lives in Lyon." in proc.stdout, proc.stderr
    exported = cli("ltm", "export", str(store), "--user", "alice", cwd=cwd)
    assert exported.returncode == 0 and len(exported.stdout.splitlines()) == 2
    gone = cli("ltm", "forget", str(store), cello, cwd=cwd)
    assert gone.returncode == 0 and f"forgot {cello}" in gone.stdout, gone.stderr
    erased = cli("ltm", "forget", str(store), "--user", "bob", "--everything", cwd=cwd)
    assert erased.returncode == 0 and "erased 1 memory of user 'bob'" in erased.stdout
    other = tmp_path / "other.db"
    both = cli("ltm", "ls", str(store), "--db", str(other), "--user", "alice", cwd=cwd)
    assert "give the location once" in one_line_error(both, "ltm ls")


def test_workdirs_are_accepted_positionally(workdir: Path, tmp_path: Path) -> None:
    cwd = tmp_path
    ls = cli("memory", "ls", str(workdir), cwd=cwd)
    assert ls.returncode == 0 and "user_profile.md" in ls.stdout, ls.stderr
    assert "1 memory (0 invalid)" in ls.stdout  # item 27: not "1 memories"
    for args in (("show", str(workdir), "user_profile"), ("show", "user_profile", str(workdir))):
        proc = cli("memory", *args, cwd=cwd)
        assert proc.returncode == 0 and "Hangzhou." in proc.stdout, proc.stderr
    found = cli("memory", "search", str(workdir), "where does the user live", "--json", cwd=cwd)
    assert found.returncode == 0 and json.loads(found.stdout)[0]["file"] == "user_profile.md"
    doctor = cli("memory", "doctor", str(workdir), cwd=cwd)
    assert doctor.returncode == 0 and "ok: 1 memory file," in doctor.stdout, doctor.stdout
    index = cli("memory", "index", str(workdir), "--rebuild", cwd=cwd)
    assert index.returncode == 0 and "with 1 entry" in index.stdout
    assert "rebuilding" in index.stderr  # progress goes to stderr


# ---------------------------------------------------------------- 26: empty results explained
async def test_empty_results_name_the_users_of_the_store(store: Path) -> None:
    cwd = store.parent
    ls = cli("ltm", "ls", str(store), "--user", "carol", cwd=cwd)
    assert ls.returncode == 0
    assert "no memories for user 'carol' (users in this store: 'alice', 'bob')" in ls.stdout
    search = cli("ltm", "search", str(store), "piano", "--user", "alice", cwd=cwd)
    assert search.returncode == 0
    assert "no memories of user 'alice' match 'piano' (2 memories in all" in search.stdout
    as_json = cli("ltm", "search", str(store), "lives", "--user", "carol", "--json", cwd=cwd)
    assert json.loads(as_json.stdout) == [] and "users in this store" in as_json.stderr
    users = cli("ltm", "users", str(store), cwd=cwd)
    assert users.returncode == 0
    rows = [line.split() for line in users.stdout.splitlines()]
    assert rows == [["USER", "ACTIVE", "TOTAL"], ["alice", "2", "2"], ["bob", "1", "1"],
                    ["2", "users", "in", str(store)]]  # fmt: skip
    as_json = cli("ltm", "users", str(store), "--json", cwd=cwd)
    assert [u["user_id"] for u in json.loads(as_json.stdout)] == ["alice", "bob"]


# ---------------------------------------------------------------- 27: the small things
def test_version_and_python_dash_m(tmp_path: Path) -> None:
    for module in ("mnemoscope", "mnemoscope.cli"):
        proc = cli("--version", cwd=tmp_path, module=module)
        assert proc.returncode == 0 and proc.stdout.strip() == f"mnemoscope {__version__}"
    helped = cli("--help", cwd=tmp_path)
    assert helped.returncode == 0 and "ltm" in helped.stdout and "--debug" in helped.stdout


def test_chat_help_documents_the_provider_environment(tmp_path: Path) -> None:
    proc = cli("chat", "--help", cwd=tmp_path)
    assert proc.returncode == 0
    needles = ["MNEMOSCOPE_PROVIDER", "MNEMOSCOPE_MODEL", "MNEMOSCOPE_BASE_URL", "ollama"]
    needles += ["OPENAI_API_KEY", "DASHSCOPE_API_KEY", "ANTHROPIC_API_KEY"]
    for needle in needles:
        assert needle in proc.stdout


def test_doctor_fix_says_what_it_could_not_fix_and_why(workdir: Path, tmp_path: Path) -> None:
    memdir = workdir / "Memory"
    (memdir / "broken.md").write_text("---\nname: Broken\n---\n")
    (memdir / "MEMORY.md").write_text(
        (memdir / "MEMORY.md").read_text() + "- [Old](old.md) — gone\n"
    )
    proc = cli("memory", "doctor", str(workdir), "--fix", cwd=tmp_path)
    assert proc.returncode == 1
    assert "fixed: removed index line 2" in proc.stdout
    not_fixed = [ln for ln in proc.stdout.splitlines() if ln.startswith("not fixed:")]
    assert len(not_fixed) == 2, proc.stdout
    assert "invalid_frontmatter: broken.md" in not_fixed[0]
    assert "cannot be guessed" in not_fixed[0]
    assert "missing_from_index: broken.md" in not_fixed[1]
    assert "its frontmatter is invalid" in not_fixed[1]
    assert proc.stdout.strip().endswith(f"2 problems in {memdir}")
    as_json = cli("memory", "doctor", str(workdir), "--fix", "--json", cwd=tmp_path)
    finding = json.loads(as_json.stdout)["findings"][0]
    assert finding["kind"] == "invalid_frontmatter" and finding["not_fixed_because"]


def test_plural_helper() -> None:
    from mnemoscope.cli._text import plural

    assert [plural(n, "memory") for n in (0, 1, 2)] == ["0 memories", "1 memory", "2 memories"]
    assert plural(1, "entry") == "1 entry" and plural(3, "entry") == "3 entries"
    assert plural(1, "problem") == "1 problem" and plural(2, "user") == "2 users"
