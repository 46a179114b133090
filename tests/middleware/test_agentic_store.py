"""MemoryStore's disk cache: incremental scans, the last completed scan, the cached index."""

from __future__ import annotations

import os
from pathlib import Path

from mnemoscope.memory.markdown._files import render_memory_file
from mnemoscope.memory.markdown._store import MemoryStore
from mnemoscope.workspace import LocalBackend


def note(name: str, body: str = "body") -> str:
    return render_memory_file(name, f"Read when {name} comes up", "project", body)


class ListingBackend(LocalBackend):
    """The local disk seen through the generic backend path (list + read), not scandir."""

    name = "listing"


def memdir_with(tmp_path: Path, files: dict[str, str]) -> Path:
    memdir = tmp_path / "Memory"
    (memdir / "sub").mkdir(parents=True)
    for name, text in files.items():
        (memdir / name).write_text(text)
    return memdir


def store_for(tmp_path: Path, kind: str) -> MemoryStore:
    backend = None if kind == "local" else ListingBackend(cwd=str(tmp_path))
    return MemoryStore(str(tmp_path), backend)


async def check_incremental_scan(tmp_path: Path, kind: str) -> None:
    memdir = memdir_with(
        tmp_path, {"a.md": note("a"), "b.md": note("b"), "sub/c.md": note("c"), "MEMORY.md": ""}
    )
    store = store_for(tmp_path, kind)
    assert store.last_scan is None
    first = await store.scan()
    assert [f.filename for f in first.files] == ["a.md", "b.md", "sub/c.md"]
    assert store.last_scan is first and not first.invalid
    ranker = store.ranker(first)
    # nothing changed: the same result object, so the ranker is reused as is
    again = await store.scan()
    assert again is first and store.ranker(again) is ranker
    # one file changed, one added: only those are parsed again
    (memdir / "b.md").write_text("no frontmatter any more")
    (memdir / "d.md").write_text(note("d"))
    third = await store.scan()
    assert third is not first and store.last_scan is third
    by_name = third.by_name()
    assert by_name["a.md"] is first.by_name()["a.md"]
    assert [f.filename for f in third.invalid] == ["b.md"] and "d.md" in by_name
    assert store.ranker(third) is not ranker
    (memdir / "d.md").unlink()
    assert "d.md" not in (await store.scan()).by_name()


async def test_scan_is_incremental_on_local_disk(tmp_path: Path) -> None:
    await check_incremental_scan(tmp_path, "local")


async def test_scan_is_incremental_through_a_generic_backend(tmp_path: Path) -> None:
    await check_incremental_scan(tmp_path, "listing")


async def test_refresh_runs_in_the_background_and_updates_last_scan(tmp_path: Path) -> None:
    memdir = memdir_with(tmp_path, {"a.md": note("a")})
    store = MemoryStore(str(tmp_path))
    first = await store.refresh()
    assert store.last_scan is first
    (memdir / "bad.md").write_text("---\nname: x\n---\n")
    task = store.refresh()
    await store.settle()
    assert task.done() and store.last_scan is task.result()
    assert [f.filename for f in store.last_scan.invalid] == ["bad.md"]


async def test_index_is_read_again_only_when_it_changes(tmp_path: Path) -> None:
    memdir = memdir_with(tmp_path, {"MEMORY.md": "- [A](a.md) — one\n"})
    for backend in (None, ListingBackend(cwd=str(tmp_path))):
        store = MemoryStore(str(tmp_path), backend)
        snap = await store.read_index_cached()
        assert snap.text == "- [A](a.md) — one\n"
        assert await store.read_index_cached() is snap  # a stat, no read
        # a same-size rewrite is still seen (it replaces the file: new inode)
        await store.write_index("- [B](b.md) — one\n", expected_version=snap.version)
        changed = await store.read_index_cached()
        assert changed is not snap and changed.text == "- [B](b.md) — one\n"
        assert changed.cheap_version == await store.index_version()
        os.replace(memdir / "MEMORY.md", memdir / "MEMORY.old")
        missing = await store.read_index_cached()
        assert missing.text == "" and missing.version == "absent"
        os.replace(memdir / "MEMORY.old", memdir / "MEMORY.md")
        (memdir / "MEMORY.md").write_text("- [A](a.md) — one\n")
