"""Search operations of the workspace helper: ``glob`` and ``grep`` (standard library only).

Part of the helper of :mod:`mnemoscope.workspace._fsops` (paths, confinement, reading,
the JSON protocol), shipped with it into every sandbox (Bubblewrap binds the files,
Docker and E2B copy them; see :func:`~mnemoscope.workspace._fsops.helper_files`);
``_fsops`` loads this one on the first search. The same confinement rules apply:
directories are walked through opened descriptors, symlinked directories are not
entered, symlinked files only when their target is a regular file inside ``roots``.

* ``glob`` matches with :class:`GlobMatcher`, linear in the path length for any pattern.
* ``grep`` decodes files as Read does (``_fsops_text``: UTF-8, UTF-16 with a BOM, stray
  bytes shown as U+FFFD), counts lines with ``split_lines``, reports every file it did
  not search and why (``skipped``), and stops at its time limit even in the middle of a
  catastrophically backtracking match (``SIGALRM`` in a helper process), with an error
  naming the file and line.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

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
from ._fsops_text import decode_exact, display, show, split_lines

MAX_WALK_ENTRIES = 200_000
MAX_GREP_FILE_BYTES = 10 * 1024 * 1024
"""Grep skips larger files (and says so in ``skipped``)."""
MAX_MATCH_TEXT_CHARS = 10_000
"""A matching line is returned cut to this many characters."""


def _walk(
    dfd: int,
    base_real: str,
    roots: list[str] | None,
    report: Callable[[str, str], None] | None = None,
) -> Iterator[tuple[str, str]]:
    """Yield (relative path, real path) of every regular file below ``dfd``.

    Directories are entered with O_NOFOLLOW (symlinked directories are not entered);
    symlinked files are yielded only when their target is a regular file inside roots.
    ``report(relative dir, reason)`` hears of what was not walked.
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
                    if seen == MAX_WALK_ENTRIES + 1 and report is not None:
                        report(
                            rel or ".",
                            f"not searched: the walk stops after {MAX_WALK_ENTRIES} entries",
                        )
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
                    except OSError as exc:
                        if report is not None:
                            report(rel + name, f"not searched: {exc.strerror or exc}")
                        continue
                    stack.append((sub, rel + name + "/", os.path.join(real, name)))
            finally:
                os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)


# ------------------------------------------------------------------------- glob
_LIT, _ONE, _CLASS, _STAR, _DSTAR, _DSTAR_SLASH = range(6)
MAX_GLOB_ALTERNATIVES = 256
"""``{a,b}`` groups multiply; a pattern that expands to more alternatives is refused."""


class GlobMatcher:
    """Match a glob (``*``, ``?``, ``[...]``, ``{a,b}``, ``**``) against a relative path.

    ``*`` and ``?`` do not cross ``/``; ``**`` does, and ``**/`` also matches nothing.
    A translated regex can take time exponential in the number of stars
    (``**a**a**a**b``), so only patterns with at most one ``**`` and one ``*`` per path
    segment (``**/*.py``, ``src/**/test_*``: at worst path length x segment length steps)
    use one; any other runs a bit-parallel NFA (one bit per pattern token, no
    backtracking: linear in the path length). Literal prefixes and suffixes are checked
    first.

    Args:
        pattern: the glob.
        use_regex: ``False`` runs the NFA for every pattern (to test it).
    """

    def __init__(self, pattern: str, *, use_regex: bool = True) -> None:
        self.pattern = pattern
        self._programs = [_GlobProgram(p, use_regex) for p in _expand_braces(pattern)]
        if len(self._programs) == 1:
            self.match = self._programs[0].match  # type: ignore[method-assign]

    def match(self, path: str) -> bool:
        return any(p.match(path) for p in self._programs)


def _expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d`` -> ``[abd, acd]`` (literal alternatives, not nested)."""
    out = [""]
    i = 0
    while i < len(pattern):
        k = pattern.find("]", i + 2) if pattern[i] == "[" else -1
        if k != -1:  # a [...] class is copied whole: braces in it are literal
            out = [o + pattern[i : k + 1] for o in out]
            i = k + 1
            continue
        j = pattern.find("}", i) if pattern[i] == "{" else -1
        if j == -1:
            out = [o + pattern[i] for o in out]
            i += 1
            continue
        alternatives = [_escape_glob(a) for a in pattern[i + 1 : j].split(",")]
        out = [o + a for o in out for a in alternatives]
        if len(out) > MAX_GLOB_ALTERNATIVES:
            raise FsError(
                "invalid",
                f"the glob pattern {pattern[:200]!r} expands to more than "
                f"{MAX_GLOB_ALTERNATIVES} alternatives; use fewer {{a,b}} groups",
            )
        i = j + 1
    return out


def _escape_glob(text: str) -> str:
    # brace alternatives are literal text (as in the regex translation of old)
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


class _GlobProgram:
    def __init__(self, pattern: str, use_regex: bool) -> None:
        tokens: list[tuple[int, Any]] = []
        i = 0
        while i < len(pattern):
            c = pattern[i]
            if pattern.startswith("**/", i):
                tokens.append((_DSTAR_SLASH, None))
                i += 3
            elif pattern.startswith("**", i):
                tokens.append((_DSTAR, None))
                i += 2
            elif c == "*":
                tokens.append((_STAR, None))
                i += 1
            elif c == "?":
                tokens.append((_ONE, None))
                i += 1
            elif c == "[" and pattern.find("]", i + 2) != -1:
                j = pattern.find("]", i + 2)
                body = pattern[i + 1 : j]
                body = "^" + body[1:] if body.startswith("!") else body
                try:
                    cls = re.compile("[" + body.replace("\\", "\\\\") + "]", re.DOTALL)
                except re.error as exc:
                    raise FsError(
                        "invalid", f"bad [...] class in the glob pattern {pattern!r}: {exc}"
                    ) from None
                tokens.append((_CLASS, cls))
                i = j + 1
            else:
                tokens.append((_LIT, c))
                i += 1
        self._tokens = tokens
        self._accept = 1 << len(tokens)
        self._eps = sum(1 << k for k, (kind, _) in enumerate(tokens) if kind >= _STAR)
        # "**/" may be skipped when it is entered, not once it has consumed characters
        self._sticky = sum(1 << k for k, (kind, _) in enumerate(tokens) if kind == _DSTAR_SLASH)
        n = 0
        while n < len(tokens) and tokens[n][0] == _LIT:
            n += 1
        self._prefix = "".join(str(t[1]) for t in tokens[:n])
        m = len(tokens)
        while m > n and tokens[m - 1][0] == _LIT:
            m -= 1
        self._suffix = "".join(str(t[1]) for t in tokens[m:])
        self._literal = n == len(tokens)
        self._masks: dict[str, tuple[int, int]] = {}
        self._regex = self._safe_regex() if use_regex else None

    def _safe_regex(self) -> re.Pattern[str] | None:
        """The regex translation when it cannot backtrack much (see :class:`GlobMatcher`)."""
        kinds = [kind for kind, _ in self._tokens]
        if kinds.count(_DSTAR) + kinds.count(_DSTAR_SLASH) > 1:
            return None
        stars = 0
        for kind, arg in self._tokens:
            if kind == _STAR:
                stars += 1
                if stars > 1:
                    return None
            elif kind == _DSTAR_SLASH or (kind == _LIT and arg == "/"):
                stars = 0
        out = []
        for kind, arg in self._tokens:
            if kind == _LIT:
                out.append(re.escape(arg))
            elif kind == _ONE:
                out.append("[^/]")
            elif kind == _CLASS:
                out.append(arg.pattern)
            elif kind == _STAR:
                out.append("[^/]*")
            elif kind == _DSTAR:
                out.append(".*")
            else:
                out.append("(?:.*/)?")
        return re.compile("".join(out) + r"\Z", re.DOTALL)

    def _closure(self, states: int) -> int:
        # a run of optional tokens (stars) can be skipped from any state in it: the
        # carry of the addition sets every bit from that state to the end of the run
        eps = self._eps
        return states | (((states & eps) + eps) ^ eps)

    def _mask(self, ch: str) -> tuple[int, int]:
        """(tokens that consume ``ch`` and move on, tokens that consume it and stay)."""
        advance = stay = 0
        for k, (kind, arg) in enumerate(self._tokens):
            bit = 1 << k
            if kind == _LIT:
                advance |= bit if arg == ch else 0
            elif kind == _ONE:
                advance |= bit if ch != "/" else 0
            elif kind == _CLASS:
                advance |= bit if arg.fullmatch(ch) else 0
            elif kind == _STAR:
                stay |= bit if ch != "/" else 0
            elif kind == _DSTAR:
                stay |= bit
            else:  # _DSTAR_SLASH: "(.*/)?": any characters, leaving after a "/"
                stay |= bit
                advance |= bit if ch == "/" else 0
        if len(self._masks) < 4096:
            self._masks[ch] = (advance, stay)
        return advance, stay

    def match(self, path: str) -> bool:
        if self._literal:
            return path == self._prefix
        if not path.startswith(self._prefix) or not path.endswith(self._suffix):
            return False
        if len(path) < len(self._prefix) + len(self._suffix):
            return False
        if self._regex is not None:
            return self._regex.match(path) is not None
        states = self._closure(1)
        masks, sticky = self._masks, self._sticky
        for ch in path:
            advance, stay = masks.get(ch) or self._mask(ch)
            kept = states & stay
            states = self._closure(((states & advance) << 1) | (kept & ~sticky)) | (kept & sticky)
            if not states:
                return False
        return bool(states & self._accept)


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
    matcher = GlobMatcher(pattern)
    dfd, real = _open_dir(check_path(path), roots)
    found: list[str] = []
    truncated = False
    try:
        for rel, _ in _walk(dfd, real, roots):
            if matcher.match(rel):
                if len(found) >= limit:
                    truncated = True
                    break
                found.append(show(os.path.join(path, rel)))
    finally:
        os.close(dfd)
    return {"paths": found, "truncated": truncated}


# ------------------------------------------------------------------------- grep
GREP_TIME_LIMIT = 10.0
"""Seconds a grep may run (a ``SIGALRM`` in the helper stops even a regex mid-match)."""
MAX_SKIPPED_LISTED = 100
"""At most this many skipped files are named in a grep result (all are counted)."""


class _TooSlowError(Exception):
    pass


class _Clock:
    """The grep's time limit: ``SIGALRM`` in the main thread of a process that does not
    use it otherwise (it interrupts a regex mid-match), else a check before each line
    (which cannot stop one slow match: callers on a thread need a process to kill)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.armed = False
        # only where nobody else uses SIGALRM (a helper process, not a test runner's
        # main thread with its own timer)
        self.hard = (
            seconds > 0
            and hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread()
            and signal.getitimer(signal.ITIMER_REAL)[0] == 0
            and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)
        )
        self._previous: Any = None

    def _ring(self, signum: int, frame: Any) -> None:
        if self.armed:
            raise _TooSlowError

    def __enter__(self) -> _Clock:
        if self.hard:
            self._previous = signal.signal(signal.SIGALRM, self._ring)
            self.armed = True
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: object) -> None:
        self.armed = False
        if self.hard:
            signal.setitimer(signal.ITIMER_REAL, 0)
            previous = self._previous
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)


def _too_slow(
    pattern: str, clock: _Clock, shown: str, line: int, since: float, files: int
) -> FsError:
    on_line = time.monotonic() - since
    where = f"line {line} of {show(shown)}" if line else show(shown)
    if line and on_line >= min(1.0, clock.seconds / 2):
        return FsError(
            "too_slow",
            f"the pattern {pattern[:200]!r} is too slow: Grep stopped it after "
            f"{clock.seconds:g} s, {on_line:.1f} s of them matching {where}. It probably "
            "backtracks heavily (nested repetition such as (a+)+ or (.*)*): simplify it, "
            "or search for a plainer substring.",
        )
    return FsError(
        "too_slow",
        f"Grep stopped after its {clock.seconds:g} s limit at {where} ({files} files "
        f"searched); narrow the search with path or glob, or simplify the pattern "
        f"{pattern[:200]!r}.",
    )


def op_grep(
    pattern: str,
    path: str,
    roots: list[str] | None = None,
    glob: str | None = None,
    ignore_case: bool = False,
    limit: int = 200,
    time_limit: float | None = None,
) -> dict:
    """Lines matching ``pattern``; files are decoded as Read decodes them.

    Returns ``matches``, ``truncated``, ``files_searched`` (files actually searched) and
    ``skipped`` (``[path, reason]`` of files not searched: too large, binary, not
    readable; at most :data:`MAX_SKIPPED_LISTED`) with ``files_skipped`` (all of them).
    Raises ``too_slow`` when the search runs over ``time_limit`` seconds.
    """
    roots = _roots(roots)
    try:
        rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise FsError("invalid", f"invalid regular expression {pattern!r}: {exc}") from None
    check_path(path)
    name_rx = None
    if glob:
        _check_pattern(glob)
        name_rx = GlobMatcher(glob)
    skipped: list[list[str]] = []
    files_skipped = 0

    def skip(shown: str, reason: str) -> None:
        nonlocal files_skipped
        files_skipped += 1
        if len(skipped) < MAX_SKIPPED_LISTED:
            skipped.append([show(shown), reason])

    matches: list[dict[str, Any]] = []
    truncated = False
    searched = 0
    clock = _Clock(GREP_TIME_LIMIT if time_limit is None else float(time_limit))
    shown, n, since = path, 0, time.monotonic()
    try:
        with clock:
            for shown, real in _grep_files(path, roots, glob, name_rx, skip):
                n = 0
                lines = _grep_lines(real, roots, shown, skip)
                if lines is None:
                    continue
                searched += 1
                for n, line in enumerate(lines, 1):
                    since = time.monotonic()
                    if since > clock.deadline:
                        raise _TooSlowError
                    if rx.search(line):
                        if len(matches) >= limit:
                            truncated = True
                            break
                        text = display(line[:MAX_MATCH_TEXT_CHARS])
                        matches.append({"path": show(shown), "line": n, "text": text})
                if truncated:
                    break
            n = 0
    except _TooSlowError:
        raise _too_slow(pattern, clock, shown, n, since, searched) from None
    return {
        "matches": matches,
        "truncated": truncated,
        "files_searched": searched,
        "skipped": skipped,
        "files_skipped": files_skipped,
    }


def _grep_files(
    path: str,
    roots: list[str] | None,
    glob: str | None,
    name_rx: GlobMatcher | None,
    skip: Callable[[str, str], None],
) -> list[tuple[str, str]]:
    """(shown path, real path) of the files to search: ``path`` or the files below it."""
    try:
        dfd, dir_real = _open_dir(path, roots)
    except NotADirectoryError:
        fd, _, real = _open_file(path, roots)
        os.close(fd)
        return [(path, real)]
    try:
        walk = _walk(dfd, dir_real, roots, lambda rel, why: skip(os.path.join(path, rel), why))
        return [
            (os.path.join(path, rel), real)
            for rel, real in walk
            if name_rx is None
            or name_rx.match(rel if glob and "/" in glob else rel.rsplit("/", 1)[-1])
        ]
    finally:
        os.close(dfd)


def _grep_lines(
    real: str, roots: list[str] | None, shown: str, skip: Callable[[str, str], None]
) -> list[str] | None:
    """The lines of one file to search, or ``None`` (and a ``skip`` entry) if it is not."""
    try:
        fd, st, _ = _open_file(real, roots)
        try:
            if st.st_size > MAX_GREP_FILE_BYTES:
                skip(
                    shown,
                    f"too large ({st.st_size} bytes; Grep reads files up to {MAX_GREP_FILE_BYTES})",
                )
                return None
            data = _read_fd(fd, MAX_GREP_FILE_BYTES)
        finally:
            os.close(fd)
    except FsError as exc:
        if exc.code == "too_large":  # from _read_fd: the file grew while it was read
            skip(shown, f"too large (it grew over {MAX_GREP_FILE_BYTES} bytes)")
        else:
            skip(shown, f"not readable: {exc.message}")
        return None
    except OSError as exc:
        skip(shown, f"not readable: {exc.strerror or exc}")
        return None
    try:
        dec = decode_exact(data)
    except UnicodeDecodeError:
        dec = (data.decode("utf-16", "replace"), "utf-16")
    if dec is None:
        skip(shown, "binary")
        return None
    return split_lines(dec[0])
