"""The local-disk walk of a memory directory, and the marks that say it needs no new walk.

Used by :class:`~mnemoscope.memory.markdown._store.MemoryStore`. A full scan walks the
directory tree and records, for every directory it lists, a :data:`DirMark`: the
directory's mtime, ctime and inode, taken from its open descriptor *before* it is listed.
Any entry created, removed, renamed or replaced in a directory changes that directory's
mtime and ctime, and every write of the workspace (the agent's Write/Edit tools, the
store's writes, ``mnemoscope memory``) is a write to a temporary file renamed over the old
one, so it changes them too. As long as every directory still carries its mark, the scan
is current except for files edited in place by another program (same inode, same
directory entry), which only a full scan sees: :class:`ChangeMarks` therefore expires
after the store's ``full_check_interval``.

Two more things make a mark untrustworthy:

* **timestamp granularity.** The kernel stamps directories with a coarse clock (one tick,
  1-10 ms); a change in the same tick as the listing would leave the mark as it was. A
  mark whose mtime or ctime is within :data:`RACY_WINDOW_NS` of the moment it was taken is
  "racy" (as git calls it) and is not trusted: the next check walks again.
* **writes made in this process**, whatever the timestamps, bump a generation counter
  shared by every store of the same directory (:func:`bump_generation`); marks taken at an
  older generation are stale.

Confinement of the walk: every directory and file is opened relative to its parent's
descriptor with ``O_NOFOLLOW``, and the top one is checked to really be the memory
directory, so no symbolic link (planted before or during the walk) leads outside it.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat as stat_mod
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mnemoscope.errors import MemoryStoreError
from mnemoscope.memory.markdown._files import INDEX_FILENAME

if TYPE_CHECKING:
    from mnemoscope.memory.markdown._files import MemoryFile

MAX_MEMORY_FILE_BYTES = 256 * 1024
"""Memory files larger than this are reported invalid and not read for retrieval."""

RACY_WINDOW_NS = 20_000_000
"""A directory changed less than this long (20 ms, two ticks of a 100 Hz kernel clock)
before its mark was taken may change again within the same timestamp: not trusted."""

TMP_PREFIX = ".mnemoscope-tmp-"
MAX_FILES = 200_000
MAX_DEPTH = 32
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

RawEntry = tuple[str, int, int, str | None]
"""``(name relative to the memory directory, mtime_ns, size, text or None)`` of a scan."""

DirMark = tuple[str, int, int, int]
"""``(directory relative to the memory directory, "" for the top, mtime_ns, ctime_ns,
inode)``; ``ctime_ns`` is 0 from backends that do not report it."""

ParseCache = dict[str, tuple[int, int, "MemoryFile"]]


@dataclass(frozen=True)
class ChangeMarks:
    """What a full scan saw of the directories, to tell later whether it is still current.

    Attributes:
        root: the memory directory's real path the scan walked.
        dirs: a mark per directory listed (``None`` when the backend reports no mtimes,
            so only a full scan can tell).
        racy: some directory changed within :data:`RACY_WINDOW_NS` of its mark.
        started: the store clock when the scan started (for ``full_check_interval``).
        generation: the directory's write generation when the scan started.
    """

    root: str
    dirs: tuple[DirMark, ...] | None
    racy: bool
    started: float
    generation: int


# ----------------------------------------------------------------- generations
_generations: dict[tuple[str, str], int] = {}
_generations_lock = threading.Lock()


def generation(key: tuple[str, str]) -> int:
    """The write generation of the directory ``key`` = ``(backend key, real path)``."""
    return _generations.get(key, 0)


def bump_generation(key: tuple[str, str]) -> None:
    """Count a write to the directory ``key`` made in this process (any thread)."""
    with _generations_lock:
        _generations[key] = _generations.get(key, 0) + 1


def is_racy(mtime_ns: int, ctime_ns: int, taken_ns: int) -> bool:
    return max(mtime_ns, ctime_ns) > taken_ns - RACY_WINDOW_NS


def marks_hold_local(marks: ChangeMarks) -> bool:
    """True when every directory of ``marks`` still has its mtime, ctime and inode.

    A few ``lstat`` calls (one per directory, usually one): cheap enough to run on the
    event loop. A directory replaced by a link fails (the link's own inode and times
    differ); so does an intermediate one, since replacing it changes its parent's mark.
    """
    if marks.dirs is None:
        return False
    for rel, mtime_ns, ctime_ns, ino in marks.dirs:
        try:
            st = os.lstat(posixpath.join(marks.root, rel) if rel else marks.root)
        except OSError:
            return False
        if (
            st.st_mtime_ns != mtime_ns
            or st.st_ctime_ns != ctime_ns
            or st.st_ino != ino
            or not stat_mod.S_ISDIR(st.st_mode)
        ):
            return False
    return True


# ------------------------------------------------------------------- the walk
def unchanged(raw: list[RawEntry], cache: ParseCache) -> bool:
    """True when ``raw`` lists exactly the cached files, each at its cached mtime and size."""
    if len(raw) != len(cache):
        return False
    for rel, mtime_ns, size, _ in raw:
        cached = cache.get(rel)
        if cached is None or cached[0] != mtime_ns or cached[1] != size:
            return False
    return True


def scan_local_compare(
    root: str, cache: ParseCache
) -> tuple[list[RawEntry], bool, tuple[DirMark, ...], bool]:
    """:func:`scan_local`, whether it found the cached files unchanged, its marks and
    whether any of them is racy (all in the worker thread)."""
    raw, marks, racy = scan_local(root, cache)
    return raw, unchanged(raw, cache), marks, racy


def scan_local(root: str, cache: ParseCache) -> tuple[list[RawEntry], tuple[DirMark, ...], bool]:
    """Walk the memory directory ``root`` (its real path): regular ``*.md`` files only.

    Dot entries are skipped. Returns the files as :data:`RawEntry` (``text`` is ``None``
    when the cached parse is still current, same size and mtime, or the file is too
    large), the marks of the directories listed and whether one of them is racy.
    """
    out: list[RawEntry] = []
    marks: list[DirMark] = []
    try:
        top = open_root(root)
    except (FileNotFoundError, NotADirectoryError):
        return out, (), False
    racy = _walk(top, "", cache, out, marks, 0)
    return out, tuple(marks), racy


def _walk(
    dfd: int,
    rel_dir: str,
    cache: ParseCache,
    out: list[RawEntry],
    marks: list[DirMark],
    depth: int,
) -> bool:
    """Scan the open directory ``dfd`` (closed here), then its subdirectories one by one
    (one descriptor per level is open at a time). Returns whether a mark is racy."""
    subdirs: list[str] = []
    try:
        # the mark is taken before the listing: a change during it leaves the mark stale
        dst = os.fstat(dfd)
        racy = is_racy(dst.st_mtime_ns, dst.st_ctime_ns, time.time_ns())
        marks.append((rel_dir.rstrip("/"), dst.st_mtime_ns, dst.st_ctime_ns, dst.st_ino))
        with os.scandir(dfd) as it:
            for entry in it:
                name = entry.name
                if name.startswith(".") or name.startswith(TMP_PREFIX):
                    continue
                rel = rel_dir + name
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat_mod.S_ISDIR(st.st_mode):
                    subdirs.append(name)
                    continue
                if not stat_mod.S_ISREG(st.st_mode) or not name.endswith(".md"):
                    continue  # links, devices, FIFOs, sockets, other files
                if rel == INDEX_FILENAME or len(out) >= MAX_FILES:
                    continue
                if needs_no_read(cache, rel, st.st_mtime_ns, st.st_size):
                    out.append((rel, st.st_mtime_ns, st.st_size, None))
                    continue
                text = _read_entry(dfd, name)
                if text is not None:
                    out.append((rel, st.st_mtime_ns, st.st_size, text))
        if depth >= MAX_DEPTH:
            return racy
        for name in subdirs:
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            except OSError:
                continue  # replaced by a link or removed since the listing
            racy = _walk(sub, f"{rel_dir}{name}/", cache, out, marks, depth + 1) or racy
        return racy
    finally:
        os.close(dfd)


def needs_no_read(cache: ParseCache, rel: str, mtime_ns: int, size: int) -> bool:
    """Whether a listed file is kept without reading it: its parse is cached at this
    ``mtime_ns`` and ``size``, or it is larger than :data:`MAX_MEMORY_FILE_BYTES` (the
    caller keeps it with no text)."""
    cached = cache.get(rel)
    return (cached is not None and cached[:2] == (mtime_ns, size)) or size > MAX_MEMORY_FILE_BYTES


def _read_entry(dfd: int, name: str) -> str | None:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
    except OSError:
        return None  # replaced by a link or removed since the listing
    try:
        if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = b""
        while len(data) <= MAX_MEMORY_FILE_BYTES:
            chunk = os.read(fd, MAX_MEMORY_FILE_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")


def open_root(root: str) -> int:
    """Open the memory directory, checking the descriptor is really ``root`` (no link)."""
    from mnemoscope.workspace import FsError, fd_path

    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise MemoryStoreError(f"{root} became a symbolic link; refused") from None
        raise
    try:
        real = fd_path(fd)
    except FsError as exc:
        os.close(fd)
        raise MemoryStoreError(f"{root}: {exc.message}") from None
    if real != root:
        os.close(fd)
        raise MemoryStoreError(f"{root} now resolves to {real}; refused")
    return fd


def read_prefix(root: str, rel: str, limit: int) -> tuple[bytes, os.stat_result]:
    """The first ``limit`` bytes of the regular file ``root/rel`` (no link anywhere below
    ``root``) and its ``fstat``."""
    fd = open_root(root)
    try:
        parts = rel.split("/")
        for part in parts[:-1]:
            nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        try:
            ffd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise MemoryStoreError(linked(posixpath.join(root, rel), "elsewhere")) from None
            raise
    finally:
        os.close(fd)
    try:
        st = os.fstat(ffd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise MemoryStoreError(f"{posixpath.join(root, rel)} is not a regular file; refused")
        chunks, total = [], 0
        while total < limit:
            chunk = os.read(ffd, min(1 << 16, limit - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks), st
    finally:
        os.close(ffd)


def linked(path: str, real: str) -> str:
    return (
        f"{path} is a symbolic link (to {real}) or moved; memory files must be regular files "
        "in the memory directory, so it is not read. Replace the link with the file itself."
    )
