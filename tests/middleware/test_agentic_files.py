"""Frontmatter, index budget, ranker and doctor of the agentic memory (no agent)."""

from __future__ import annotations

from pathlib import Path

from mnemoscope.memory.markdown._doctor import diagnose, rebuild_index, repair
from mnemoscope.memory.markdown._files import (
    bound_index,
    index_line,
    parse_index,
    parse_memory_file,
    render_memory_file,
)
from mnemoscope.memory.markdown._prompt import render_index_section
from mnemoscope.memory.markdown._ranker import BM25Ranker, tokenize
from mnemoscope.memory.markdown._store import MemoryStore
from mnemoscope.model._tokens import estimate_tokens


def test_frontmatter_round_trip_and_validation() -> None:
    text = render_memory_file("Profile: home", "When: the city matters", "user", "Hangzhou")
    mf = parse_memory_file("p.md", "/m/p.md", text)
    assert mf.valid and (mf.name, mf.description, mf.type) == (
        "Profile: home",
        "When: the city matters",
        "user",
    )
    assert mf.body == "Hangzhou\n"
    bad = parse_memory_file("b.md", "/m/b.md", "---\nname: x\ntype: diary\n---\nbody")
    assert bad.errors == [
        "missing field 'description'",
        "type 'diary' is not one of user, feedback, project, reference",
    ]
    assert parse_memory_file("n.md", "/m/n.md", "just text").errors[0].startswith("no frontmatter")


def test_unquoted_colon_is_read_leniently_with_a_warning() -> None:
    text = "---\nname: Style\ndescription: When asked: answer briefly\ntype: feedback\n---\nx\n"
    mf = parse_memory_file("s.md", "/m/s.md", text)
    assert mf.valid and mf.description == "When asked: answer briefly"
    assert mf.warnings and "not valid YAML" in mf.warnings[0]


def test_index_lines_parse_with_any_dash() -> None:
    entries = parse_index(
        "# Memory\n- [A](a.md) — hook a\n* [B](./sub/b.md) - hook b\n- [C](c.md)\nnot an entry\n"
    )
    assert [(e.lineno, e.target, e.hook) for e in entries] == [
        (2, "a.md", "hook a"),
        (3, "sub/b.md", "hook b"),
        (4, "c.md", ""),
    ]
    mf = parse_memory_file("a.md", "/m/a.md", render_memory_file("A", "desc", "user", "x"))
    assert index_line(mf) == "- [A](a.md) — desc"


def test_bound_index_enforces_lines_and_tokens() -> None:
    text = "".join(f"- [N{i}](n{i}.md) — hook number {i}\n" for i in range(50))
    view = bound_index(text, max_lines=10, max_tokens=10_000, count_tokens=estimate_tokens)
    assert (view.shown_lines, view.cut_by, view.omitted_count, len(view.omitted)) == (
        10,
        "lines",
        40,
        20,
    )
    assert view.omitted[0].target == "n10.md" and view.omitted[0].lineno == 11
    view = bound_index(text, max_lines=100, max_tokens=60, count_tokens=estimate_tokens)
    assert view.cut_by == "tokens" and 0 < view.shown_lines < 10 and view.tokens <= 60
    view = bound_index(text, max_lines=100, max_tokens=10_000, count_tokens=estimate_tokens)
    assert not view.truncated and view.text == text.rstrip("\n")
    section = render_index_section(
        bound_index(text, max_lines=3, max_tokens=99, count_tokens=estimate_tokens),
        index_path="/m/MEMORY.md",
        omitted_names_max=2,
    )
    assert "lines 4-50 of 50" in section and "n3.md, n4.md, and 45 more" in section


def test_tokenizer_handles_cjk_and_word_forms() -> None:
    assert tokenize("The user lives in 杭州") == ["user", "liv", "杭", "州", "杭州"]
    assert tokenize("living") == tokenize("lived") == tokenize("live")


def test_bm25_ranks_the_matching_memory_first() -> None:
    ranker = BM25Ranker(
        [
            ("home.md", "Home", "Where the user lives", "Hangzhou, near West Lake"),
            ("style.md", "Style", "How to answer", "Concise Chinese answers"),
            ("pet.md", "Pet", "The user's cat", "A cat called Mochi"),
        ]
    )
    assert [k for k, _ in ranker.search("what is my cat's name")] == ["pet.md"]
    assert ranker.search("West Lake")[0][0] == "home.md"
    assert ranker.search("杭州") == []


async def test_doctor_finds_and_fixes_index_problems(tmp_path: Path) -> None:
    store = MemoryStore(str(tmp_path))
    await store.ensure_layout()
    memdir = Path(store.memdir)
    (memdir / "a.md").write_text(render_memory_file("A", "About apples", "user", "apples"))
    (memdir / "b.md").write_text(render_memory_file("B", "About bananas", "user", "bananas"))
    (memdir / "a_copy.md").write_text(render_memory_file("A", "About apples", "user", "apples"))
    (memdir / "loose.md").write_text("---\nname: L\ndescription: a: b\ntype: user\n---\nl\n")
    (memdir / "bad.md").write_text("no frontmatter")
    (memdir / "MEMORY.md").write_text(
        "- [A](a.md) — apples\n- [Gone](gone.md) — missing\n- [A again](a.md) — twice\n"
    )
    report = await diagnose(store)
    kinds = sorted(f.kind for f in report.findings)
    assert kinds == sorted(
        [
            "invalid_frontmatter",
            "loose_yaml",
            "dangling_index_line",
            "duplicate_index_line",
            "missing_from_index",
            "missing_from_index",
            "missing_from_index",
            "missing_from_index",
            "near_duplicate",
        ]
    )
    done = await repair(store, report)
    assert any("gone.md" in d for d in done)
    report = await diagnose(store)
    # what cannot be fixed without guessing stays reported
    assert sorted(f.kind for f in report.findings) == [
        "invalid_frontmatter",
        "missing_from_index",
        "near_duplicate",
    ]
    index = parse_index((memdir / "MEMORY.md").read_text())
    assert [e.target for e in index] == ["a.md", "a_copy.md", "b.md", "loose.md"]
    assert parse_memory_file("loose.md", "", (memdir / "loose.md").read_text()).warnings == []
    files = await rebuild_index(store)
    assert [f.filename for f in files] == ["a.md", "a_copy.md", "b.md", "loose.md"]
