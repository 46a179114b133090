"""Hardening of the backend file operations (issue 10, items 8, 11, 13, 19, 20, 22).

Most tests run over every backend of ``conftest.py`` (Local and Bubblewrap here): the same
helper code (``_fsops*.py``) runs in both, in a thread / child process or in the sandbox.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from mnemoscope.permission import PermissionContext, PermissionMode
from mnemoscope.tool import Edit, ToolContext, Write
from mnemoscope.workspace import (
    ABSENT,
    FileChangedError,
    LocalBackend,
    WorkspaceError,
    _fsops,
    _grep_worker,
)
from mnemoscope.workspace._fsops_search import GlobMatcher
from mnemoscope.workspace._fsops_text import line_at, show, split_lines

REDOS_PATTERN = r"(a+)+$"
REDOS_LINE = "a" * 28 + "!"  # about 2**28 steps: tens of seconds without a limit


def _sparse(path: str | bytes | Path, size: int, head: bytes = b"") -> None:
    """Create ``path`` with ``head``, extended to ``size`` bytes without using disk."""
    with open(path, "wb") as f:
        f.write(head)
        if size:
            f.truncate(size)


def _serialisable(value: object) -> bool:
    """What a message store needs: JSON that encodes to UTF-8 (no lone surrogates)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# ------------------------------------------------------------------- item 8: ReDoS
async def test_redos_grep_leaves_the_loop_running_and_says_too_slow(case):
    b, w = case.backend, case.workdir
    await b.write_text(f"{w}/slow.txt", f"first\nsecond\n{REDOS_LINE}\n")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        with pytest.raises(WorkspaceError) as ei:
            await asyncio.wait_for(b.grep(REDOS_PATTERN, w, time_limit=1.0), 60)
    finally:
        task.cancel()
    assert ei.value.code == "too_slow"
    msg = ei.value.message
    assert "too slow" in msg and REDOS_PATTERN in msg
    assert "line 3 of" in msg and f"{w}/slow.txt" in msg
    assert ticks >= 5  # the loop ran while the pattern backtracked


async def test_cancelling_a_grep_kills_its_process(tmp_path):
    (tmp_path / "slow.txt").write_text(REDOS_LINE + "\n")
    b = LocalBackend(cwd=str(tmp_path))
    task = asyncio.create_task(b.grep(REDOS_PATTERN, str(tmp_path), time_limit=120))
    pid = await _busy_helper(task)
    assert pid is not None, "the grep did not run in a helper process"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped  # noqa: ASYNC240


async def test_a_grep_process_that_overruns_its_limit_is_killed(tmp_path, monkeypatch):
    """The backstop: a helper still running after its own limit (here: a backstop set
    below that limit) is killed, and the call says the search was too slow."""
    monkeypatch.setattr(_grep_worker, "BACKSTOP_SECONDS", -119.0)  # kill after 1 s
    (tmp_path / "slow.txt").write_text(REDOS_LINE + "\n")
    b = LocalBackend(cwd=str(tmp_path))
    task = asyncio.create_task(b.grep(REDOS_PATTERN, str(tmp_path), time_limit=120))
    pid = await _busy_helper(task)
    with pytest.raises(WorkspaceError) as ei:
        await asyncio.wait_for(task, 60)
    assert ei.value.code == "too_slow" and "did not finish" in ei.value.message
    assert pid is not None and not Path(f"/proc/{pid}").exists()  # noqa: ASYNC240
    monkeypatch.undo()
    res = await b.grep("a", str(tmp_path), time_limit=30)  # a fresh helper serves the next
    assert len(res.matches) == 1


async def _busy_helper(task: asyncio.Task[object]) -> int | None:
    for _ in range(3000):
        pids = _grep_worker.busy_pids()
        if pids or task.done():
            return pids[0] if pids else None
        await asyncio.sleep(0.01)
    return None


def test_a_pathological_glob_pattern_finishes(tmp_path):
    """``**a**a**a**a**b`` translated to a regex backtracks polynomially in the number of
    ``**`` (hours on this path); the matcher must be linear. Run in a child process so
    that a slow matcher fails the test instead of hanging it."""
    deep = tmp_path / ("a" * 200) / ("a" * 200) / ("a" * 200)
    deep.mkdir(parents=True)
    (deep / ("a" * 200)).write_text("x")
    (deep / ("a" * 199 + "b")).write_text("x")
    request = json.dumps(
        {"op": "glob", "args": {"pattern": "**a**a**a**a**a**b", "path": str(tmp_path)}}
    )
    helper = _fsops.helper_paths()["_fsops.py"]
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", helper, "once", request],
            capture_output=True,
            timeout=60,
            check=True,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("Glob of a pathological pattern did not finish within 60 s")
    res = json.loads(done.stdout)
    assert res["ok"], res
    assert res["result"]["paths"] == [str(deep / ("a" * 199 + "b"))]


def _old_glob_regex(pattern: str) -> re.Pattern[str]:
    """The regex translation the matcher replaces (its semantics are kept)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and pattern.find("]", i + 2) != -1:
            j = pattern.find("]", i + 2)
            body = pattern[i + 1 : j]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        elif c == "{" and pattern.find("}", i) != -1:
            j = pattern.find("}", i)
            out.append("(?:" + "|".join(re.escape(a) for a in pattern[i + 1 : j].split(",")) + ")")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


GLOB_PATTERNS = [
    "**/*.md",
    "*.md",
    "notes/*.txt",
    "*.{md,txt}",
    "**",
    "**/*",
    "a/**/b.md",
    "a/**b*",
    "[!a]*.md",
    "[a-c]?.md",
    "?",
    "*",
    "**/deep/**/x",
    "{a,b/c}/*",
    "x*y*z",
    "a.md",
    "**/",
    "*/*",
    "**a**a**b",
    "[*]*",
]
GLOB_PATHS = [
    "a.md",
    "b.md",
    "ab.md",
    "c1.md",
    "notes/a.txt",
    "notes/deep/a.txt",
    "a/b.md",
    "a/x/y/b.md",
    "a/bcd",
    "a/x/bz",
    "x",
    "xy",
    "xyz",
    "xaybz",
    "x/y/z",
    "q/deep/r/x",
    "deep/x",
    "b/c/d",
    "b/d",
    "aab",
    "a/a/b",
    "*star",
    "",
    "dir/",
    "new\nline.md",
]


@pytest.mark.parametrize("use_regex", [True, False])
@pytest.mark.parametrize("pattern", GLOB_PATTERNS)
def test_glob_matcher_agrees_with_the_regex_translation(pattern, use_regex):
    old, new = _old_glob_regex(pattern), GlobMatcher(pattern, use_regex=use_regex)
    for path in GLOB_PATHS:
        assert new.match(path) == bool(old.match(path)), (pattern, path)


# ------------------------------------------------------- item 11: big unread files
BIG = 1 << 30  # 1 GiB, sparse: costs no disk


async def test_write_and_edit_of_a_big_unread_file_read_almost_nothing(tmp_path):
    big = tmp_path / "big.log"
    _sparse(big, BIG)
    b = LocalBackend(cwd=str(tmp_path))
    st = os.stat(big)
    same_meta = f"{st.st_mtime_ns}:{st.st_size}:0000000000000000"
    perm = PermissionContext(mode=PermissionMode.ACCEPT_EDITS, cwd=str(tmp_path))
    ctx = ToolContext(permission_context=perm)
    tracemalloc.start()
    try:
        for attempt in (
            b.write_text(str(big), "x", expected_version=ABSENT),
            b.write_bytes(str(big), b"x", expected_version=ABSENT),
            b.edit(str(big), "a", "b", expected_version=ABSENT),
            b.edit(str(big), "a", "b", expected_version="1:2:0000000000000000"),
            b.edit(str(big), "a", "b", expected_version=same_meta),  # hashed, in chunks
        ):
            with pytest.raises(FileChangedError):
                await attempt
        assert (await b.stat(str(big), hash=False)).size == BIG
        with pytest.raises(WorkspaceError) as ei:
            await b.edit(str(big), "a", "b")
        assert ei.value.code == "too_large" and "Edit changes files of up to" in ei.value.message
        for tool, kwargs in (
            (Write(backend=b), {"content": "x"}),
            (Edit(backend=b), {"old_string": "a", "new_string": "b"}),
        ):
            r = await tool.call(tool.Input(file_path=str(big), **kwargs), ctx)
            assert r.is_error and "Read" in r.output
        assert big.stat().st_size == BIG
        res = await b.write_text(str(big), "small\n")  # reads only the head of the old file
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.stat.size == 6 and big.read_bytes() == b"small\n"
    assert peak < 16 * 1024 * 1024, f"peak {peak} bytes for a {BIG} byte file"


# --------------------------------------------------------------- item 13: names
async def test_undecodable_and_control_names_come_back_escaped(case):
    b, w = case.backend, case.workdir
    wb = os.fsencode(w)
    for name in (b"bad\xff.txt", b"ctl\nname.txt", b"esc\x1b[31m.txt"):
        _sparse(wb + b"/" + name, 0, b"needle\n")
    expected = {"bad\\xff.txt", "ctl\\nname.txt", "esc\\u001b[31m.txt"}
    paths, _ = await b.glob("*.txt", w)
    assert {p.rsplit("/", 1)[1] for p in paths} == expected
    res = await b.grep("needle", w)
    assert {m.path.rsplit("/", 1)[1] for m in res.matches} == expected
    names = {e.name for e in await b.list(w)}
    assert names == expected
    bad = os.fsdecode(wb + b"/bad\xff.txt")
    st = await b.stat(bad)
    assert st.exists and st.path.endswith("/bad\\xff.txt")
    with pytest.raises(WorkspaceError) as ei:
        await b.read_file(os.fsdecode(wb + b"/missing\xff/x"))
    assert "missing\\xff" in ei.value.message
    assert _serialisable([paths, [m.path for m in res.matches], sorted(names), st.path])
    assert _serialisable(ei.value.message)


def test_show_escapes_only_what_needs_it():
    assert show("plain/caf\u00e9 \u4e2d.md") == "plain/caf\u00e9 \u4e2d.md"
    assert show("a\udcffb\tc\u202ed") == "a\\xffb\\tc\\u202ed"


# ---------------------------------------------------------- item 19: grep skips
async def test_grep_searches_utf16_and_reports_what_it_skipped(case):
    b, w = case.backend, case.workdir
    await b.write_text(f"{w}/plain.txt", "a needle\n")
    await b.write_bytes(f"{w}/wide.txt", "w\u00e9 needle\r\n".encode("utf-16"))
    await b.write_bytes(f"{w}/blob.bin", b"needle\x00\x01")
    _sparse(f"{w}/huge.txt", 11 * 1024 * 1024, b"needle\n")  # over the 10 MiB cap
    res = await b.grep("needle", w)
    assert sorted((m.path, m.text) for m in res.matches) == [
        (f"{w}/plain.txt", "a needle"),
        (f"{w}/wide.txt", "w\u00e9 needle"),
    ]
    assert res.files_searched == 2 and res.files_skipped == 2
    reasons = dict(res.skipped)
    assert set(reasons) == {f"{w}/blob.bin", f"{w}/huge.txt"}
    assert reasons[f"{w}/blob.bin"] == "binary"
    assert "too large" in reasons[f"{w}/huge.txt"]


# ------------------------------------------------------- item 20: stray bytes
async def test_a_stray_byte_stays_a_byte_and_new_text_is_utf8(case):
    b, w = case.backend, case.workdir
    path = f"{w}/mixed.txt"
    await b.write_bytes(path, b"caf\xc3\xa9 one\nstray \xff here\n")
    assert await b.read_text(path) == "caf\u00e9 one\nstray \ufffd here\n"
    res = await b.grep("stray", w)
    assert [m.text for m in res.matches] == ["stray \ufffd here"]
    await b.edit(path, "one", "caf\u00e9 two")  # untouched bytes round-trip
    assert await b.read_bytes(path) == b"caf\xc3\xa9 caf\xc3\xa9 two\nstray \xff here\n"
    # old_string copied from Read (U+FFFD) matches the byte and writes it back
    res2 = await b.edit(path, "stray \ufffd here", "stray \ufffd h\u00e9re")
    assert res2.line == 2
    assert await b.read_bytes(path) == b"caf\xc3\xa9 caf\xc3\xa9 two\nstray \xff h\xc3\xa9re\n"
    await b.write_text(path, "caf\u00e9\n")
    assert await b.read_bytes(path) == b"caf\xc3\xa9\n"


# ----------------------------------------------------------- item 22: lines
async def test_grep_and_edit_count_lines_like_read(case):
    b, w = case.backend, case.workdir
    path = f"{w}/breaks.txt"
    text = "a\fb\x0bc\x1cd\x85e\u2028f\u2029g\nold mac\rdos\r\nneedle\n"
    await b.write_bytes(path, text.encode("utf-8"))
    res = await b.grep("needle|dos|\f", path)
    assert [(m.line, m.text) for m in res.matches] == [
        (1, "a\fb\x0bc\x1cd\x85e\u2028f\u2029g"),
        (3, "dos"),
        (4, "needle"),
    ]
    assert (await b.edit(path, "needle", "pin")).line == 4
    assert (await b.edit(path, "dos", "DOS")).line == 3


def test_split_lines_splits_on_newline_crlf_and_cr_only():
    assert split_lines("a\fb\nc\r\nd\re\x85f\u2028g\n") == ["a\fb", "c", "d", "e\x85f\u2028g"]
    assert split_lines("") == [] and split_lines("\n") == [""] and split_lines("x") == ["x"]
    text = "one\r\ntwo\rthree\nfour"
    for n, line in enumerate(split_lines(text), 1):
        assert line_at(text, text.index(line)) == n
    assert line_at(text, text.index("\ntwo")) == 1  # the LF of a CRLF is on its line


def test_utf16_text_write_keeps_the_encoding(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes("x\r\ny\r\n".encode("utf-16"))
    _fsops.dispatch("write_text", {"path": str(path), "text": "caf\u00e9\nz\n"})
    raw = path.read_bytes()
    assert raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    assert raw.decode("utf-16") == "caf\u00e9\r\nz\r\n"


def test_helper_runs_from_its_own_directory_alone(tmp_path):
    """The sandboxes copy only the helper files: they must import nothing else."""
    for name, data in _fsops.helper_files().items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "f.txt").write_bytes(b"x\xff\n")
    lines = [
        json.dumps({"op": "grep", "args": {"pattern": "x", "path": str(tmp_path / "f.txt")}}),
        json.dumps(
            {
                "op": "edit",
                "args": {"path": str(tmp_path / "f.txt"), "old_string": "x", "new_string": "y"},
            }
        ),
    ]
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(tmp_path / "_fsops.py"), "serve"],
        input="\n".join(lines).encode(),
        capture_output=True,
        timeout=60,
        check=True,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["ok"] for a in answers] == [True, True], answers
    assert answers[0]["result"]["matches"][0]["text"] == "x\ufffd"
    assert Path(tmp_path / "f.txt").read_bytes() == b"y\xff\n"
