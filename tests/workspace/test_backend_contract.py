"""One contract, every backend (see conftest.py for which run here)."""

from __future__ import annotations

import codecs

import pytest

from mnemoscope.workspace import (
    ABSENT,
    EditMatchError,
    FileChangedError,
    PathDeniedError,
    WorkspaceError,
    WorkspaceFileNotFoundError,
)


async def test_bytes_round_trip_and_stat(case):
    b, w = case.backend, case.workdir
    path = f"{w}/data.bin"
    assert not await b.exists(path)
    assert (await b.stat(path)).version == ABSENT
    res = await b.write_bytes(path, b"\x00\x01binary\xff")
    assert res.created and res.stat.size == 9
    assert await b.read_bytes(path) == b"\x00\x01binary\xff"
    st = await b.stat(path)
    assert st.exists and st.type == "file" and st.version == res.stat.version
    res2 = await b.write_bytes(path, b"\x00\x01binary\xfe")  # same size, other content
    assert not res2.created and res2.stat.version != st.version


async def test_relative_paths_resolve_against_cwd(case):
    b, w = case.backend, case.workdir
    await b.write_text("rel/dir/a.txt", "hi\n")  # parents are created
    assert await b.read_text(f"{w}/rel/dir/a.txt") == "hi\n"
    assert {e.name for e in await b.list(f"{w}/rel")} == {"dir"}


@pytest.mark.parametrize(
    "encoding,prefix",
    [("utf-8", b""), ("utf-8-sig", codecs.BOM_UTF8), ("utf-16", b"")],
)
async def test_text_writes_keep_encoding_and_crlf(case, encoding, prefix):
    b, w = case.backend, case.workdir
    path = f"{w}/enc.txt"
    original = "caf\u00e9 one\r\ntwo\r\n"
    await b.write_bytes(path, original.encode(encoding))
    assert await b.read_text(path) == original
    await b.write_text(path, "caf\u00e9 three\nfour\n")
    raw = await b.read_bytes(path)
    assert raw.startswith(prefix)
    assert raw.decode(encoding) == "caf\u00e9 three\r\nfour\r\n"


async def test_edit_once_all_and_errors(case):
    b, w = case.backend, case.workdir
    path = f"{w}/e.md"
    await b.write_text(path, "a x b x c\n")
    with pytest.raises(EditMatchError) as ei:
        await b.edit(path, "x", "y")
    assert "2 times" in str(ei.value) and ei.value.code == "multiple_matches"
    with pytest.raises(EditMatchError) as ei:
        await b.edit(path, "zzz", "y")
    assert ei.value.code == "no_match"
    res = await b.edit(path, "x", "y", replace_all=True)
    assert res.replacements == 2
    res = await b.edit(path, "a y", "A")
    assert res.replacements == 1 and res.line == 1
    assert await b.read_text(path) == "A b y c\n"
    with pytest.raises(WorkspaceFileNotFoundError):
        await b.edit(f"{w}/missing.md", "a", "b")


async def test_edit_matches_lf_strings_in_crlf_file(case):
    b, w = case.backend, case.workdir
    path = f"{w}/crlf.md"
    await b.write_bytes(path, b"line one\r\nline two\r\n")
    await b.edit(path, "one\nline two", "1\nline 2")
    assert await b.read_bytes(path) == b"line 1\r\nline 2\r\n"


async def test_expected_version_is_a_compare_and_swap(case):
    b, w = case.backend, case.workdir
    path = f"{w}/v.txt"
    with pytest.raises(FileChangedError):
        await b.write_text(path, "x", expected_version="1:1:deadbeef")
    first = await b.write_text(path, "one", expected_version=ABSENT)
    with pytest.raises(FileChangedError) as ei:
        await b.write_text(path, "again", expected_version=ABSENT)
    assert "created" in str(ei.value)
    second = await b.write_text(path, "two", expected_version=first.stat.version)
    with pytest.raises(FileChangedError):
        await b.edit(path, "two", "three", expected_version=first.stat.version)
    await b.edit(path, "two", "three", expected_version=second.stat.version)
    assert await b.read_text(path) == "three"


async def test_list_glob_grep(case):
    b, w = case.backend, case.workdir
    await b.write_text(f"{w}/notes/a.md", "alpha\nBeta\n")
    await b.write_text(f"{w}/notes/deep/b.md", "beta gamma\n")
    await b.write_text(f"{w}/notes/c.txt", "beta\n")
    await b.write_bytes(f"{w}/notes/bin.md", b"beta\x00\x01")
    entries = {e.name: e.type for e in await b.list(f"{w}/notes")}
    assert entries == {"a.md": "file", "bin.md": "file", "c.txt": "file", "deep": "directory"}
    paths, truncated = await b.glob("**/*.md", f"{w}/notes")
    assert paths == [f"{w}/notes/a.md", f"{w}/notes/bin.md", f"{w}/notes/deep/b.md"]
    assert not truncated
    assert (await b.glob("*.{md,txt}", f"{w}/notes"))[0] == [
        f"{w}/notes/a.md",
        f"{w}/notes/bin.md",
        f"{w}/notes/c.txt",
    ]
    assert (await b.glob("**/*", f"{w}/notes", limit=2))[1] is True
    res = await b.grep("beta", f"{w}/notes", glob="*.md", ignore_case=True)
    assert [(m.path, m.line) for m in res.matches] == [
        (f"{w}/notes/a.md", 2),
        (f"{w}/notes/deep/b.md", 1),
    ]  # binary file skipped
    res = await b.grep("beta", f"{w}/notes/c.txt")
    assert [m.text for m in res.matches] == ["beta"]
    with pytest.raises(PathDeniedError):
        await b.grep("(", f"{w}/notes")


async def test_mkdir_remove(case):
    b, w = case.backend, case.workdir
    await b.mkdir(f"{w}/x/y/z")
    assert (await b.stat(f"{w}/x/y")).type == "directory"
    await b.write_text(f"{w}/x/y/z/f", "1")
    with pytest.raises(WorkspaceError):
        await b.remove(f"{w}/x")
    await b.remove(f"{w}/x/y/z/f")
    assert not await b.exists(f"{w}/x/y/z/f")
    await b.remove(f"{w}/x", recursive=True)
    assert not await b.exists(f"{w}/x")


async def test_errors_are_typed(case):
    b, w = case.backend, case.workdir
    with pytest.raises(WorkspaceFileNotFoundError):
        await b.read_bytes(f"{w}/nope")
    await b.mkdir(f"{w}/d")
    with pytest.raises(WorkspaceError) as ei:
        await b.read_bytes(f"{w}/d")
    assert ei.value.code == "is_directory"
    await b.write_bytes(f"{w}/big", b"x" * 100)
    with pytest.raises(WorkspaceError) as ei:
        await b.read_bytes(f"{w}/big", max_bytes=10)
    assert ei.value.code == "too_large"


async def test_roots_confine_every_operation(case):
    b, w = case.backend, case.workdir
    roots = [w]
    r = await b.exec("ln -s /etc/passwd link && ln -s /etc linkdir && echo ok")
    assert r.exit_code == 0, r.stderr
    for coro in (
        b.read_bytes("/etc/passwd", roots=roots),
        b.read_bytes(f"{w}/link", roots=roots),
        b.read_bytes(f"{w}/linkdir/passwd", roots=roots),
        b.write_text(f"{w}/link", "x", roots=roots),
        b.write_text(f"{w}/linkdir/new", "x", roots=roots),
        b.edit(f"{w}/link", "root", "toor", roots=roots),
        b.list("/etc", roots=roots),
        b.glob("*", f"{w}/linkdir", roots=roots),
        b.grep("root", "/etc", roots=roots),
        b.stat(f"{w}/link", roots=roots),
        b.remove("/etc/passwd", roots=roots),
        b.mkdir("/etc/mnemo", roots=roots),
    ):
        with pytest.raises(PathDeniedError) as ei:
            await coro
        assert "outside the allowed directories" in str(ei.value)
    # inside the roots the same backend works, and a glob does not list links that lead out
    await b.write_text(f"{w}/ok.md", "fine", roots=roots)
    assert await b.glob("*", w, roots=roots) == ([f"{w}/ok.md"], False)


async def test_write_through_symlink_inside_roots_updates_the_target(case):
    b, w = case.backend, case.workdir
    await b.write_text(f"{w}/real.md", "v1")
    assert (await b.exec("ln -s real.md alias.md")).exit_code == 0
    await b.write_text(f"{w}/alias.md", "v2", roots=[w])
    assert await b.read_text(f"{w}/real.md") == "v2"
    assert (await b.stat(f"{w}/alias.md")).path == f"{w}/real.md"


async def test_exec_output_exit_code_and_timeout(case):
    b = case.backend
    r = await b.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr.strip(), r.timed_out) == (3, "out\n", "err", False)
    r = await b.exec("sleep 30", timeout=0.5)
    assert r.timed_out


async def test_weak_stat_and_list_report_changes_without_reading(case):
    b, w = case.backend, case.workdir
    path = f"{w}/weak/n.md"
    assert (await b.stat(path, hash=False)).version == ABSENT
    res = await b.write_text(path, "one\n")
    weak = await b.stat(path, hash=False)
    assert weak.exists and weak.size == 4 and weak.mtime_ns == res.stat.mtime_ns
    assert weak.version == weak.weak_version != res.stat.version
    (entry,) = await b.list(f"{w}/weak")
    assert (entry.name, entry.size, entry.mtime_ns) == ("n.md", 4, res.stat.mtime_ns)
    assert entry.weak_version == weak.version
    # same size, same content: still a new version (every write replaces the file)
    await b.write_text(path, "one\n")
    assert (await b.stat(path, hash=False)).version != weak.version
    assert (await b.list(f"{w}/weak"))[0].weak_version != entry.weak_version


async def test_weak_version_is_refused_as_expected_version(case):
    b, w = case.backend, case.workdir
    path = f"{w}/cas.md"
    await b.write_text(path, "one\n")
    weak = (await b.stat(path, hash=False)).version
    with pytest.raises(PathDeniedError, match="weak token"):
        await b.write_text(path, "two\n", expected_version=weak)
    assert await b.read_text(path) == "one\n"
    exact = (await b.stat(path)).version
    await b.write_text(path, "two\n", expected_version=exact)
    assert await b.read_text(path) == "two\n"
