"""Search operations of the workspace helper: ``glob`` and ``grep`` (standard library only).

The second half of the helper whose first half is :mod:`mnemoscope.workspace._fsops`
(paths, confinement, reading, atomic writes, the JSON protocol). Both files are shipped
together into every sandbox (Bubblewrap binds them, Docker and E2B copy them; see
:func:`~mnemoscope.workspace._fsops.helper_files`) and ``_fsops`` loads this one on the
first search. The same confinement rules apply: directories are walked through opened
descriptors, symlinked directories are not entered, symlinked files only when their
target is a regular file inside ``roots``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

try:  # as part of the mnemoscope package
    from ._fsops import (
        _DIR_FLAGS,
        TMP_PREFIX,
        FsError,
        _open_dir,
        _open_file,
        _read_fd,
        _roots,
        _within,
        check_path,
    )
except ImportError:  # in a sandbox, next to _fsops.py (which registered itself as "_fsops")
    from _fsops import (  # type: ignore[no-redef]
        _DIR_FLAGS,
        TMP_PREFIX,
        FsError,
        _open_dir,
        _open_file,
        _read_fd,
        _roots,
        _within,
        check_path,
    )

MAX_WALK_ENTRIES = 200_000
MAX_GREP_FILE_BYTES = 10 * 1024 * 1024


def _walk(dfd: int, base_real: str, roots: list[str] | None) -> Iterator[tuple[str, str]]:
    """Yield (relative path, real path) of every regular file below ``dfd``.

    Directories are entered with O_NOFOLLOW (symlinked directories are not entered);
    symlinked files are yielded only when their target is a regular file inside roots.
    """
    seen = 0
    stack: list[tuple[int, str, str]] = [(os.dup(dfd), "", base_real)]
    try:
        while stack:
            fd, rel, real = stack.pop()
            try:
                with os.scandir(fd) as it:
                    entries = sorted(it, key=lambda e: e.name, reverse=True)
                subdirs = []
                for e in reversed(entries):
                    seen += 1
                    if seen > MAX_WALK_ENTRIES or e.name.startswith(TMP_PREFIX):
                        continue
                    relp, realp = rel + e.name, os.path.join(real, e.name)
                    if e.is_dir(follow_symlinks=False):
                        subdirs.append(e.name)
                    elif e.is_symlink():
                        target = os.path.realpath(realp)
                        if (roots is None or _within(target, roots)) and os.path.isfile(target):
                            yield relp, target
                    elif e.is_file(follow_symlinks=False):
                        yield relp, realp
                for name in reversed(subdirs):
                    try:
                        sub = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                    except OSError:
                        continue
                    stack.append((sub, rel + name + "/", os.path.join(real, name)))
            finally:
                os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob (``*``, ``?``, ``[...]``, ``{a,b}``, ``**``) to a regex."""
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


def _check_pattern(pattern: str) -> None:
    if not pattern or "\x00" in pattern:
        raise FsError("invalid", "the glob pattern is empty or contains a NUL byte")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise FsError(
            "invalid", f"the glob pattern {pattern!r} must be relative and must not contain '..'"
        )


def op_glob(pattern: str, path: str, roots: list[str] | None = None, limit: int = 1000) -> dict:
    roots = _roots(roots)
    _check_pattern(pattern)
    rx = glob_regex(pattern)
    dfd, real = _open_dir(check_path(path), roots)
    found: list[str] = []
    truncated = False
    try:
        for rel, _ in _walk(dfd, real, roots):
            if rx.match(rel):
                if len(found) >= limit:
                    truncated = True
                    break
                found.append(os.path.join(path, rel))
    finally:
        os.close(dfd)
    return {"paths": found, "truncated": truncated}


def op_grep(
    pattern: str,
    path: str,
    roots: list[str] | None = None,
    glob: str | None = None,
    ignore_case: bool = False,
    limit: int = 200,
) -> dict:
    roots = _roots(roots)
    try:
        rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise FsError("invalid", f"invalid regular expression {pattern!r}: {exc}") from None
    check_path(path)
    name_rx = None
    if glob:
        _check_pattern(glob)
        name_rx = glob_regex(glob)
    files: list[tuple[str, str]]
    try:
        dfd, dir_real = _open_dir(path, roots)
    except NotADirectoryError:
        fd, _, real = _open_file(path, roots)
        os.close(fd)
        files = [(path, real)]
    else:
        try:
            files = [
                (os.path.join(path, rel), rp)
                for rel, rp in _walk(dfd, dir_real, roots)
                if name_rx is None or name_rx.match(rel if "/" in glob else rel.rsplit("/", 1)[-1])  # type: ignore[operator]
            ]
        finally:
            os.close(dfd)
    matches: list[dict[str, Any]] = []
    truncated = False
    for shown, real in files:
        try:
            fd, _, _ = _open_file(real, roots)
        except (OSError, FsError):
            continue
        try:
            data = _read_fd(fd, MAX_GREP_FILE_BYTES)
        except FsError:
            continue
        finally:
            os.close(fd)
        if b"\x00" in data[:8192]:
            continue
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if rx.search(line):
                if len(matches) >= limit:
                    truncated = True
                    break
                matches.append({"path": shown, "line": n, "text": line})
        if truncated:
            break
    return {"matches": matches, "truncated": truncated, "files_searched": len(files)}
