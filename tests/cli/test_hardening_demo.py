"""``mnemoscope demo`` (issue 10, item 29): honest, bilingual, idempotent, three layers.

Each run is a subprocess, as a user starts it, with a timeout.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

CLEAN_ENV = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("MNEMOSCOPE_", "OPENAI_", "DASHSCOPE_", "ANTHROPIC_"))
}


def demo(workdir: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mnemoscope.cli", "demo", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env or CLEAN_ENV,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout


def memory_files(workdir: Path) -> dict[str, tuple[str, int]]:
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted((workdir / "Memory").glob("*.md"))
    }


def test_demo_says_the_model_is_scripted_and_answers_in_both_languages(tmp_path: Path) -> None:
    out = demo(tmp_path / "w")
    assert "the model is SCRIPTED" in out and "no LLM, key or network" in out
    replies = [ln for ln in out.splitlines() if ln.startswith("assistant > ")]
    assert len(replies) == 2
    for line in replies:
        assert re.search(r"[\u4e00-\u9fff]", line)  # Chinese
    english = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("(English: ")]
    assert len(english) >= 2 and "Hangzhou" in english[0]


def test_the_first_run_shows_the_three_layers(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    out = demo(workdir)
    # short-term session in SQLite
    assert f"session (short-term):   {workdir}/session.db" in out
    assert "new session: 0 earlier messages" in out
    assert (workdir / "session.db").is_file()
    # agentic memory
    assert "[tool] Write" in out and "[hint injected before the model call]" in out
    assert (workdir / "Memory" / "user_profile.md").is_file()
    # native long-term store, hash embedder (no download)
    assert f"native long-term store: {workdir}/ltm.db" in out and "no download" in out
    retrieved = out.split("=== what the native store retrieved for agent two ===")[1]
    assert "Remember that I live in Hangzhou" in retrieved.split("===")[0]
    listed = subprocess.run(
        [sys.executable, "-m", "mnemoscope.cli", "ltm", "ls", str(workdir / "ltm.db"),
         "--user", "demo-user"],
        capture_output=True, text=True, timeout=120, env=CLEAN_ENV,
    )  # fmt: skip
    assert listed.returncode == 0 and "Hangzhou" in listed.stdout, listed.stderr


def test_a_second_run_on_the_same_workdir_resumes_without_a_tool_error(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    first = demo(workdir)
    assert "[result:error]" not in first
    saved = memory_files(workdir)
    second = demo(workdir)
    assert "[result:error]" not in second and "error" not in second.casefold().replace(
        "[result:error]", ""
    )
    assert "[tool] Write" not in second  # nothing is rewritten
    assert "user_profile.md already exists (an earlier run saved it): not rewritten" in second
    assert "MEMORY.md already lists both memories: not rewritten" in second
    assert memory_files(workdir) == saved  # same bytes, same mtimes
    resumed = re.search(r"\[session\] resumed: (\d+) earlier messages", second)
    assert resumed and int(resumed.group(1)) > 0
    third = demo(workdir)
    assert "[result:error]" not in third and "[tool] Write" not in third


def test_an_index_with_other_entries_is_extended_not_overwritten(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    memdir = workdir / "Memory"
    memdir.mkdir(parents=True)
    (memdir / "project_notes.md").write_text(
        "---\nname: Project notes\ndescription: What the project is\ntype: project\n---\n\nX.\n"
    )
    (memdir / "MEMORY.md").write_text("- [Project notes](project_notes.md) — the project\n")
    out = demo(workdir)
    assert "[result:error]" not in out
    index = (memdir / "MEMORY.md").read_text()
    assert index.splitlines()[0] == "- [Project notes](project_notes.md) — the project"
    assert "(user_profile.md)" in index and "(feedback_answer_style.md)" in index


def test_without_the_sql_extra_the_demo_runs_and_says_what_to_install(tmp_path: Path) -> None:
    shadow = tmp_path / "core-install" / "sqlalchemy"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'sqlalchemy'\", name='sqlalchemy')\n"
    )
    env = {**CLEAN_ENV, "PYTHONPATH": os.pathsep.join([str(shadow.parent), *sys.path])}
    out = demo(tmp_path / "w", env=env)
    assert "session (short-term):   skipped" in out and "mnemoscope[sql]" in out
    assert "what the native store retrieved for agent two" in out
