"""Access to one memory directory: layout, index, scans (cached), writes with version checks.

Example::

    store = MemoryStore("/tmp/demo")              # local disk, <workdir>/Memory
    await store.ensure_layout()
    text, version = await store.read_index()
    scan = await store.scan()                     # every memory file, parsed and validated
    ranker = store.ranker(scan)                   # BM25 over the valid ones (cached)

On local disk (no backend, or a ``LocalBackend``) a scan is one pass of ``os.scandir`` in a
worker thread, and only files whose size or modification time changed are read again. With
any other workspace backend the same is done with one ``list`` call per directory (names,
sizes, mtimes) and a read of each changed file only. A scan in which nothing changed
returns the previous :class:`ScanResult` object, so what is derived from it (valid files,
the ranker) is reused as is. The store keeps the result of the latest scan that completed
(:attr:`MemoryStore.last_scan`) and can run scans in the background (:meth:`refresh`).
Whether one is needed at all is told without looking at any file
(:meth:`MemoryStore.refresh_if_stale`): by the directories' mtimes, ctimes and inodes, a
counter of this process's writes, and a full walk at least every ``full_check_interval``
seconds for files edited in place (see ``_walk``).
``MEMORY.md`` is read again only when its weak version (mtime, size, inode) changes
(:meth:`MemoryStore.read_index_cached`), and at most :data:`MAX_INDEX_BYTES` of it are read,
lines cut at :data:`MAX_INDEX_LINE_CHARS` characters (:class:`IndexSnapshot` says what
was cut).

Confinement (done by the base class, ``_directory.MemoryDirectory``, which reaches the
files; this module caches what is read from them): the memory directory must resolve
strictly inside the workdir (:meth:`MemoryStore.confine`, checked before every scan and
by the middleware before every model call and tool call), and every file is read or
written at its real path below that directory, refused when it is a symbolic link or not
a regular file. So a
``Memory`` link to ``/`` or a ``MEMORY.md`` link to a secret (say, planted in a cloned
repository used as the workdir) is refused with :class:`MemoryStoreError` instead of
being walked or shown to the model. All of this is a cache of the disk shared by every
reply; nothing per reply is kept here. Every
write uses the workspace's crash-safe, locked write (``mnemoscope.workspace._fsops``
locally), so the middleware, the CLI and the agent's Write/Edit tools serialise on the
same per-directory lock and version checks are exact.
"""

from __future__ import annotations

import asyncio
import itertools
import posixpath
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory.markdown._directory import (
    ABSENT,
    MemoryDirectory,
    _ConflictError,
    _TooLargeError,
    below,
)
from mnemoscope.memory.markdown._files import (
    INDEX_FILENAME,
    MEMORY_DIRNAME,
    IndexSnapshot,
    MemoryFile,
    ScanResult,
    cut_index_text,
    parse_memory_file,
)
from mnemoscope.memory.markdown._paths import (
    lexists,
)
from mnemoscope.memory.markdown._ranker import BM25Ranker, RankerDoc, doc_terms
from mnemoscope.memory.markdown._walk import (
    MAX_MEMORY_FILE_BYTES,
    ChangeMarks,
    DirMark,
    ParseCache,
    RawEntry,
    bump_generation,
    generation,
    marks_hold_local,
    read_prefix,
    scan_local_compare,
    unchanged,
)
from mnemoscope.memory.markdown._walk import linked as _linked

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from mnemoscope.workspace import BackendBase

DEFAULT_FULL_CHECK_INTERVAL = 30.0
"""Seconds after which :meth:`MemoryStore.refresh_if_stale` walks the whole directory again
even when no directory changed (to see files edited in place by other programs)."""

MAX_INDEX_BYTES = 256 * 1024
"""At most this many bytes of ``MEMORY.md`` are read (the rest is reported as not shown)."""

MAX_INDEX_LINE_CHARS = 1_000
"""Index lines longer than this are cut (and reported as cut)."""


def check_full_check_interval(value: object, owner: str) -> float:
    """``value`` as the seconds between full scans (a number >= 0; ``True`` is refused).

    Raises:
        UserError: naming ``owner`` (the class that was given it) and the parameter.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise UserError(
            f"{owner}: full_check_interval must be a number of seconds >= 0 "
            f"(0 walks the memory directory at every reply), got {value!r}"
        )
    return float(value)


class MemoryStore(MemoryDirectory):
    """One memory directory, ``<workdir>/<memory_dirname>``.

    Args:
        workdir: the agent's working directory (a path in the backend's file system).
        backend: a workspace backend; ``None`` means the local disk.
        memory_dirname: the directory name under ``workdir``.
        full_check_interval: seconds after which :meth:`refresh_if_stale` walks the whole
            directory even when no directory changed (default
            :data:`DEFAULT_FULL_CHECK_INTERVAL`; ``0``: at every call).
        clock: the monotonic clock of that interval (``time.monotonic``; tests pass their own).

    Raises:
        UserError: ``full_check_interval`` is negative or not a number.
    """

    def __init__(
        self,
        workdir: str,
        backend: BackendBase | None = None,
        *,
        memory_dirname: str = MEMORY_DIRNAME,
        full_check_interval: float = DEFAULT_FULL_CHECK_INTERVAL,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.full_check_interval = check_full_check_interval(full_check_interval, "MemoryStore")
        self.clock: Callable[[], float] = clock or time.monotonic
        """The clock of ``full_check_interval`` (replaceable, e.g. by a test's fake clock)."""
        self.full_scans = 0
        """How many full scans (walks of the whole directory) this store has started."""
        self._marks: ChangeMarks | None = None  # what the scan behind last_scan saw
        super().__init__(workdir, backend, memory_dirname=memory_dirname)
        # the parse cache and the scan result it describes, replaced together (never
        # mutated), so a scan running in a worker thread cannot tear them apart
        self._parsed: tuple[ParseCache, ScanResult | None] = ({}, None)
        self._ranker: tuple[tuple[Any, ...], BM25Ranker] | None = None
        self._ranker_lock = threading.Lock()
        self._terms: dict[str, tuple[float | None, int, Counter[str], int]] = {}
        self._layout_ready = False
        self.last_scan: ScanResult | None = None
        """The result of the latest scan that completed (``None`` before the first)."""
        self._scan_seq = itertools.count(1)
        self._installed_seq = 0
        self._refreshes: set[asyncio.Task[ScanResult]] = set()
        self._index_cache: IndexSnapshot | None = None

    # ----------------------------------------------------------------- layout
    async def ensure_layout(self) -> bool:
        """Create the directory and an empty ``MEMORY.md`` unless they exist.

        The index is created with a compare-and-swap against "absent", so two processes
        starting at once cannot overwrite each other (nor a line the first one added).
        Returns True when this call created the index. Nothing is created when the
        directory is not confined (:meth:`confine` raises), nor over anything already
        at the index's place (a link there is left for the reads to refuse).
        """
        root = await self._root_now()
        if self._local and lexists(posixpath.join(root, INDEX_FILENAME)):
            return False
        if not self._local and self._layout_ready:
            return False
        from mnemoscope.workspace import WorkspaceError

        work_real = self._work_real or self.workdir
        try:
            # the workdir is the user's choice; the memory directory is created below it
            # with every component checked, so a link planted meanwhile is refused
            await self._backend().mkdir(work_real, parents=True)
            await self._backend().mkdir(root, roots=[work_real], parents=True)
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot create {self.memdir}: {exc.message}") from None
        try:
            await self._write(INDEX_FILENAME, b"", expected_version=ABSENT)
            created = True
        except _ConflictError:
            created = False
        self._layout_ready = True
        return created

    # ------------------------------------------------------------------ index
    async def index_version(self) -> str:
        """A token that changes when ``MEMORY.md`` changes, without reading it.

        The weak version ``mtime_ns:size:i<inode>``: every workspace write replaces the
        inode, so each of them changes it.
        """
        return await self._weak_version(self.index_path)

    async def read_index(self) -> IndexSnapshot:
        """``MEMORY.md`` as it is now (empty, version ``"absent"``, when missing).

        At most :data:`MAX_INDEX_BYTES` are read, so a huge index costs no more than a
        normal one; the snapshot says what was left out (:attr:`IndexSnapshot.complete`).
        With a backend other than the local disk an index over the limit is not read at
        all (the backends read whole files only) and the snapshot's text is empty.

        Raises:
            MemoryStoreError: the index is a symbolic link or not a regular file, or the
                memory directory is not confined.
        """
        try:
            data, cheap, exact, real = await self._read(
                INDEX_FILENAME, max_bytes=MAX_INDEX_BYTES, inline=True
            )
        except FileNotFoundError:
            snap = IndexSnapshot("", "absent", ABSENT, self.index_path)
        except _TooLargeError:
            data, size, cheap, real = await self._read_index_prefix()
            text, used, long_lines = cut_index_text(data, size, max_line_chars=MAX_INDEX_LINE_CHARS)
            snap = IndexSnapshot(text, cheap, cheap, real, size, used, long_lines)
        else:
            text, used, long_lines = cut_index_text(
                data, len(data), max_line_chars=MAX_INDEX_LINE_CHARS
            )
            snap = IndexSnapshot(text, cheap, exact, real, len(data), used, long_lines)
        self._index_cache = snap
        return snap

    async def _read_index_prefix(self) -> tuple[bytes, int, str, str]:
        """The first :data:`MAX_INDEX_BYTES` of an index over the limit (local disk), or
        nothing (other backends); returns ``(data, size, weak version, real path)``."""
        root = await self._root_now()
        if self._local:
            # inline, like the read of a normal index (see _read): bounded, and only when
            # the index changed
            data, st = read_prefix(root, INDEX_FILENAME, MAX_INDEX_BYTES)
            weak = f"{st.st_mtime_ns}:{st.st_size}:i{st.st_ino}"
            return data, st.st_size, weak, posixpath.join(root, INDEX_FILENAME)
        from mnemoscope.workspace import WorkspaceError

        path = posixpath.join(root, INDEX_FILENAME)
        try:
            fst = await self._backend().stat(path, roots=[root], hash=False)
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot read {self.index_path}: {exc.message}") from None
        if fst.path != path:
            raise MemoryStoreError(_linked(self.index_path, fst.path))
        return b"", fst.size, fst.weak_version, path

    async def exact_index_version(self) -> str:
        """The exact version of ``MEMORY.md`` (hashes the whole file; for explicit
        rewrites such as a rebuild, when :meth:`read_index` read only part of it)."""
        from mnemoscope.workspace import WorkspaceError

        root = await self._root_now()
        path = posixpath.join(root, INDEX_FILENAME)
        try:
            st = await self._backend().stat(path, roots=[root], hash=True)
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot stat {self.index_path}: {exc.message}") from None
        if st.exists and st.path != path:
            raise MemoryStoreError(_linked(self.index_path, st.path))
        return st.version

    async def read_index_cached(self) -> IndexSnapshot:
        """:meth:`read_index`, but only a stat when the index is unchanged since the last read."""
        cached = self._index_cache
        if cached is not None and await self.index_version() == cached.cheap_version:
            return cached
        return await self.read_index()

    async def write_index(self, text: str, *, expected_version: str | None) -> str:
        """Replace ``MEMORY.md`` if it is still at ``expected_version``; returns the new version.

        Raises:
            MemoryStoreError: the index changed since it was read (re-read and retry).
        """
        try:
            return await self._write(INDEX_FILENAME, text.encode("utf-8"), expected_version)
        except _ConflictError as exc:
            raise MemoryStoreError(f"{self.index_path} changed since it was read: {exc}") from None

    # ------------------------------------------------------------------ files
    async def read_text(self, filename: str) -> str:
        """A memory file's text (at most :data:`MAX_MEMORY_FILE_BYTES`).

        Raises:
            FileNotFoundError: no such file.
            MemoryStoreError: too large, a symbolic link, not a regular file, or outside
                the memory directory.
        """
        data, _, _, _ = await self._read(filename, max_bytes=MAX_MEMORY_FILE_BYTES)
        return data.decode("utf-8", errors="replace")

    async def write_text(
        self, filename: str, text: str, *, expected_version: str | None = None
    ) -> str:
        try:
            return await self._write(filename, text.encode("utf-8"), expected_version)
        except _ConflictError as exc:
            raise MemoryStoreError(f"{filename} changed since it was read: {exc}") from None

    async def remove(self, filename: str) -> None:
        root = await self.confine()
        try:
            await self._backend().remove(below(root, filename), roots=[root])
        finally:
            bump_generation((self.backend_key, root))

    def note_write(self) -> None:
        """Count a write to the memory directory made in this process by other code (the
        agent's Write/Edit tools): the next :meth:`refresh_if_stale` walks the directory
        whatever the timestamps say. The store's own writes count themselves."""
        if self._root is not None:
            bump_generation((self.backend_key, self._root))

    async def scan(self) -> ScanResult:
        """Every memory file, parsed and validated; unchanged files come from a cache.

        A full scan: every directory is listed and every file's size and mtime compared
        (:meth:`refresh_if_stale` is the cheap way to learn whether one is needed). When no
        file was added, removed or changed since the previous scan, that scan's
        :class:`ScanResult` is returned again. The result becomes :attr:`last_scan`
        unless a scan that started later has completed first.
        """
        seq = next(self._scan_seq)
        self.full_scans += 1
        root = await self.confine()  # never walk a directory that moved out of the workdir
        started, gen = self.clock(), generation((self.backend_key, root))
        cache, base = self._parsed
        dirs: tuple[DirMark, ...] | None
        if self._local:  # the comparison and the parsing run in the worker thread too
            result, dirs, racy = await asyncio.to_thread(self._walk_local, root, cache, base)
        else:
            raw, dirs, racy = await self._scan_backend(cache)
            same = unchanged(raw, cache)
            result = base if base is not None and same else self._merge(raw, cache)
        if seq > self._installed_seq:
            self._installed_seq = seq
            self.last_scan = result
            self._marks = ChangeMarks(root, dirs, racy, started, gen)
        return result

    def refresh(self) -> asyncio.Task[ScanResult]:
        """Start a :meth:`scan` in the background and return its task.

        The task belongs to the store, not to the caller: it completes (and updates
        :attr:`last_scan`) even when the reply that started it ends first. Its failure is
        seen by whoever awaits it.
        """
        return self._own(self.scan())

    def refresh_if_stale(self) -> asyncio.Future[ScanResult]:
        """:attr:`last_scan` if nothing changed since it was taken, else a :meth:`refresh`.

        "Nothing changed" is decided without looking at any file: no write through this
        library since (in this process), every directory the scan listed still has the
        mtime, ctime and inode it had then, none of them had changed just before (see
        :data:`~mnemoscope.memory.markdown._walk.RACY_WINDOW_NS`), and the scan is
        younger than :attr:`full_check_interval`. On the local disk that is one ``lstat``
        per directory, inline, and the future returned is already done; on other backends
        one ``stat`` per directory, in the background task returned. So a file another
        program creates, removes, renames or rewrites by renaming is seen at the next
        call, and one it edits in place at the first call ``full_check_interval`` after
        the previous full scan.

        The caller is not told which happened; :attr:`full_scans` counts the walks.
        """
        scan, marks = self.last_scan, self._marks
        if scan is None or marks is None or not self._marks_usable(marks):
            return self.refresh()
        if self._local:
            if not marks_hold_local(marks):
                return self.refresh()
            done: asyncio.Future[ScanResult] = asyncio.get_running_loop().create_future()
            done.set_result(scan)
            return done
        return self._own(self._check_backend(scan, marks))

    def _marks_usable(self, marks: ChangeMarks) -> bool:
        return (
            marks.dirs is not None
            and not marks.racy
            and marks.root == self._root
            and self.clock() - marks.started < self.full_check_interval
            and generation((self.backend_key, marks.root)) == marks.generation
        )

    async def _check_backend(self, scan: ScanResult, marks: ChangeMarks) -> ScanResult:
        from mnemoscope.workspace import WorkspaceError

        backend = self._backend()
        for rel, mtime_ns, _, ino in marks.dirs or ():
            path = below(marks.root, rel)
            try:
                st = await backend.stat(path, roots=[marks.root], hash=False)
            except WorkspaceError:
                return await self.scan()  # the scan reports what is wrong
            moved = (st.mtime_ns, st.ino) != (mtime_ns, ino)
            if moved or st.path != path or st.type != "directory":
                return await self.scan()
        # another scan may have been installed meanwhile: it is at least as new
        return self.last_scan or scan

    def _own(self, coro: Coroutine[Any, Any, ScanResult]) -> asyncio.Task[ScanResult]:
        task = asyncio.get_running_loop().create_task(coro, name="agentic-memory-scan")
        self._refreshes.add(task)
        task.add_done_callback(_forget(self._refreshes))
        return task

    async def settle(self) -> None:
        """Wait until the background scans started so far have finished."""
        pending = [t for t in self._refreshes if not t.done()]
        if pending:
            await asyncio.wait(pending)

    def _walk_local(
        self, root: str, cache: ParseCache, base: ScanResult | None
    ) -> tuple[ScanResult, tuple[DirMark, ...], bool]:
        # in a worker thread: parsing thousands of files must not block the event loop
        raw, same, dirs, racy = scan_local_compare(root, cache)
        return (base if base is not None and same else self._merge(raw, cache)), dirs, racy

    def _merge(
        self,
        raw: list[RawEntry],
        cache: ParseCache,
    ) -> ScanResult:
        files: list[MemoryFile] = []
        parsed: ParseCache = {}
        for rel, mtime_ns, size, text in raw:
            cached = cache.get(rel)
            if text is None and cached is not None and cached[:2] == (mtime_ns, size):
                mf = cached[2]
            elif text is None:  # too large
                mf = MemoryFile(
                    filename=rel,
                    path=self.path_of(rel),
                    mtime=mtime_ns / 1e9,
                    size=size,
                    errors=[f"file is {size} bytes, over the {MAX_MEMORY_FILE_BYTES} byte limit"],
                )
            else:
                mf = parse_memory_file(
                    rel, self.path_of(rel), text, mtime=mtime_ns / 1e9, size=size
                )
            parsed[rel] = (mtime_ns, size, mf)
            files.append(mf)
        files.sort(key=lambda f: f.filename)
        result = ScanResult(files)
        self._parsed = (parsed, result)
        return result

    def ranker(self, scan: ScanResult) -> BM25Ranker:
        """A BM25 ranker over the valid files of ``scan``.

        Rebuilt only when files changed, and then only changed files are tokenized again.
        CPU-bound for large directories: async code should use :meth:`ranker_async`.
        """
        sig = scan.signature
        with self._ranker_lock:
            if self._ranker is not None and (self._ranker[0] is sig or self._ranker[0] == sig):
                return self._ranker[1]
            terms: dict[str, tuple[float | None, int, Counter[str], int]] = {}
            prepared = []
            for f in scan.valid:
                cached = self._terms.get(f.filename)
                if cached is not None and cached[:2] == (f.mtime, f.size):
                    counts, length = cached[2], cached[3]
                else:
                    doc = RankerDoc(f.filename, f.name or "", f.description or "", f.body)
                    counts, length = doc_terms(doc)
                terms[f.filename] = (f.mtime, f.size, counts, length)
                prepared.append((f.filename, counts, length))
            self._terms = terms
            ranker = BM25Ranker((), prepared=prepared)
            self._ranker = (sig, ranker)
            return ranker

    async def ranker_async(self, scan: ScanResult) -> BM25Ranker:
        """:meth:`ranker`, built in a worker thread when it must be rebuilt."""
        cached = self._ranker
        if cached is not None and (cached[0] is scan.signature or cached[0] == scan.signature):
            return cached[1]
        return await asyncio.to_thread(self.ranker, scan)


def _forget(tasks: set[asyncio.Task[ScanResult]]) -> Any:
    def done(task: asyncio.Task[ScanResult]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here; whoever awaits the task still sees it

    return done
