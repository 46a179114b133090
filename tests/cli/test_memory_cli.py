"""``mnemoscope memory`` subcommands and ``mnemoscope demo`` over real files."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from mnemoscope.cli._demo import run_demo
from mnemoscope.cli._memory import add_memory_parser, run_memory_command
from mnemoscope.memory.markdown._files import parse_index, render_memory_file


def run(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="mnemoscope")
    add_memory_parser(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    code = run_memory_command(parser.parse_args(["memory", *argv]), out)
    return code, out.getvalue()


@pytest.fixture
def workdir(tmp_path: Path) -> str:
    memdir = tmp_path / "Memory"
    memdir.mkdir()
    (memdir / "user_profile.md").write_text(
        render_memory_file("User profile", "Where the user lives", "user", "Hangzhou.")
    )
    (memdir / "style.md").write_text(
        render_memory_file("Answer style", "How to answer", "feedback", "Concise Chinese.")
    )
    (memdir / "broken.md").write_text("---\nname: Broken\n---\n")
    (memdir / "MEMORY.md").write_text(
        "- [User profile](user_profile.md) — where the user lives\n- [Old](old.md) — gone\n"
    )
    return str(tmp_path)


def test_ls_lists_type_name_age_and_flags_invalid(workdir: str) -> None:
    code, out = run("ls", "--workdir", workdir)
    assert code == 0
    rows = out.splitlines()
    assert rows[0].split() == ["TYPE", "NAME", "FILE", "AGE", "DESCRIPTION"]
    assert any(r.startswith("user") and "user_profile.md" in r and "today" in r for r in rows)
    assert any(r.startswith("INVALID") and "broken.md" in r for r in rows)
    assert rows[-1].startswith("3 memories (1 invalid)")
    code, out = run("ls", "--workdir", workdir, "--type", "feedback", "--json")
    assert [r["file"] for r in json.loads(out)] == ["style.md"]


def test_show_by_file_or_name(workdir: str) -> None:
    code, out = run("show", "user_profile", "--workdir", workdir)
    assert code == 0 and "Hangzhou." in out and out.startswith("# ")
    code, out = run("show", "answer style", "--workdir", workdir)
    assert code == 0 and "Concise Chinese." in out
    code, out = run("show", "nothing", "--workdir", workdir)
    assert code == 1 and "no memory named 'nothing'" in out


def test_search_ranks_with_the_local_ranker(workdir: str) -> None:
    code, out = run("search", "which city does the user live in", "--workdir", workdir, "--json")
    hits = json.loads(out)
    assert code == 0 and hits[0]["file"] == "user_profile.md" and hits[0]["score"] > 0


def test_doctor_reports_then_fixes(workdir: str) -> None:
    code, out = run("doctor", "--workdir", workdir)
    assert code == 1
    assert "invalid_frontmatter: broken.md" in out
    assert "dangling_index_line: line 2 points to old.md" in out
    assert "missing_from_index: style.md has no line in MEMORY.md (fixable with --fix)" in out
    code, out = run("doctor", "--fix", "--workdir", workdir)
    assert "fixed: removed index line 2" in out and "fixed: added an index line for style.md" in out
    assert code == 1, "broken.md cannot be fixed automatically and is still reported"
    index = parse_index(Path(workdir, "Memory", "MEMORY.md").read_text())
    assert [e.target for e in index] == ["user_profile.md", "style.md"]


def test_index_rebuild(workdir: str) -> None:
    code, out = run("index", "--rebuild", "--workdir", workdir)
    assert code == 0 and "2 entries" in out
    text = Path(workdir, "Memory", "MEMORY.md").read_text()
    assert text == (
        "- [User profile](user_profile.md) — Where the user lives\n"
        "- [Answer style](style.md) — How to answer\n"
    )
    code, out = run("index", "--workdir", workdir)
    assert out == text


def test_missing_memory_dir_is_an_error(tmp_path: Path) -> None:
    code, out = run("ls", "--workdir", str(tmp_path))
    assert code == 1 and "no memory directory" in out


async def test_demo_plays_the_scenario_offline(tmp_path: Path) -> None:
    out = io.StringIO()
    assert await run_demo(out, workdir=str(tmp_path)) == 0
    text = out.getvalue()
    assert "[result:success] Updated" in text and "MEMORY.md" in text
    assert "- [User profile](user_profile.md) — where the user lives" in text
    assert "The user lives in Hangzhou, China." in text.split("=== hint injected")[1]
    assert (tmp_path / "Memory" / "user_profile.md").exists()
