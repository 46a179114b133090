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
``MEMORY.md`` is read again only when its weak version (mtime, size, inode) changes
(:meth:`MemoryStore.read_index_cached`). All of this is a cache of the disk shared by every
reply; nothing per reply is kept here. Every
write uses the workspace's crash-safe, locked write (``mnemoscope.workspace._fsops``
locally), so the middleware, the CLI and the agent's Write/Edit tools serialise on the
same per-directory lock and version checks are exact.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import posixpath
import threading
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemoscope.errors import MemoryStoreError
from mnemoscope.middleware._agentic_files import (
    INDEX_FILENAME,
    MEMORY_DIRNAME,
    MemoryFile,
    parse_memory_file,
)
from mnemoscope.middleware._agentic_ranker import BM25Ranker, RankerDoc, doc_terms

if TYPE_CHECKING:
    from mnemoscope.workspace import BackendBase

MAX_MEMORY_FILE_BYTES = 256 * 1024
"""Memory files larger than this are reported invalid and not read for retrieval."""

_TMP_PREFIX = ".mnemoscope-tmp-"
_MAX_FILES = 200_000


@dataclass(frozen=True)
class IndexSnapshot:
    """``MEMORY.md`` at one moment.

    Attributes:
        text: its content.
        cheap_version: the weak version ``mtime_ns:size:i<inode>`` (what
            :meth:`MemoryStore.index_version` returns).
        version: the workspace's exact version token (``expected_version`` of a write).
        real_path: the file's real path (symlinks resolved).
    """

    text: str
    cheap_version: str
    version: str
    real_path: str


@dataclass
class ScanResult:
    """Every memory file of the directory (``MEMORY.md`` excluded), sorted by file name."""

    files: list[MemoryFile]

    @functools.cached_property
    def valid(self) -> list[MemoryFile]:
        return [f for f in self.files if f.valid]

    @functools.cached_property
    def invalid(self) -> list[MemoryFile]:
        return [f for f in self.files if not f.valid]

    @functools.cached_property
    def invalid_signature(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """File names and errors of the invalid files (what the system prompt lists)."""
        return tuple((f.filename, tuple(f.errors)) for f in self.invalid)

    @functools.cached_property
    def valid_by_name(self) -> dict[str, MemoryFile]:
        return {f.filename: f for f in self.valid}

    def by_name(self) -> dict[str, MemoryFile]:
        return {f.filename: f for f in self.files}

    @functools.cached_property
    def signature(self) -> tuple[tuple[str, float | None, int], ...]:
        return tuple((f.filename, f.mtime, f.size) for f in self.files)


class MemoryStore:
    """One memory directory, ``<workdir>/<memory_dirname>``.

    Args:
        workdir: the agent's working directory (a path in the backend's file system).
        backend: a workspace backend; ``None`` means the local disk.
        memory_dirname: the directory name under ``workdir``.
    """

    def __init__(
        self,
        workdir: str,
        backend: BackendBase | None = None,
        *,
        memory_dirname: str = MEMORY_DIRNAME,
    ) -> None:
        self.backend = backend
        self._local = backend is None or _is_local_backend(backend)
        if self._local:
            workdir = os.path.abspath(os.path.expanduser(workdir))
        self.workdir = workdir
        self.memdir = posixpath.join(workdir, memory_dirname)
        self.index_path = posixpath.join(self.memdir, INDEX_FILENAME)
        self._parsed: dict[str, tuple[int, int, MemoryFile]] = {}
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
        self._parsed_scan: ScanResult | None = None

    # ------------------------------------------------------------------ paths
    def path_of(self, filename: str) -> str:
        return posixpath.join(self.memdir, filename)

    def filename_of(self, path: str) -> str | None:
        """The name relative to the memory directory, or ``None`` when outside it."""
        norm = posixpath.normpath(path)
        if self._local:
            norm = os.path.realpath(norm) if os.path.exists(norm) else os.path.abspath(norm)
            memdir = os.path.realpath(self.memdir) if os.path.exists(self.memdir) else self.memdir
        else:
            memdir = posixpath.normpath(self.memdir)
        if norm.startswith(memdir.rstrip("/") + "/"):
            return norm[len(memdir.rstrip("/")) + 1 :]
        return None

    # ----------------------------------------------------------------- layout
    async def ensure_layout(self) -> bool:
        """Create the directory and an empty ``MEMORY.md`` unless they exist.

        The index is created with a compare-and-swap against "absent", so two processes
        starting at once cannot overwrite each other (nor a line the first one added).
        Returns True when this call created the index.
        """
        if self._local and await asyncio.to_thread(os.path.isfile, self.index_path):
            return False
        if not self._local and self._layout_ready:
            return False
        try:
            await self._write(self.index_path, b"", expected_version=_ABSENT)
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
        """``MEMORY.md`` as it is now (empty, version ``"absent"``, when missing)."""
        try:
            data, cheap, exact, real = await self._read(self.index_path)
        except FileNotFoundError:
            snap = IndexSnapshot("", "absent", _ABSENT, self.index_path)
        else:
            snap = IndexSnapshot(data.decode("utf-8", errors="replace"), cheap, exact, real)
        self._index_cache = snap
        return snap

    async def read_index_cached(self) -> IndexSnapshot:
        """:meth:`read_index`, but only a stat when the index is unchanged since the last read."""
        cached = self._index_cache
        if cached is not None and await self.index_version() == cached.cheap_version:
            return cached
        return await self.read_index()

    @property
    def resolved_backend(self) -> BackendBase:
        """The backend the files live in (a ``LocalBackend`` when none was given)."""
        return self._backend()

    @property
    def backend_key(self) -> str:
        """The file namespace of this store (the backend's ``key``)."""
        return self._backend().key

    async def write_index(self, text: str, *, expected_version: str | None) -> str:
        """Replace ``MEMORY.md`` if it is still at ``expected_version``; returns the new version.

        Raises:
            MemoryStoreError: the index changed since it was read (re-read and retry).
        """
        try:
            return await self._write(self.index_path, text.encode("utf-8"), expected_version)
        except _ConflictError as exc:
            raise MemoryStoreError(f"{self.index_path} changed since it was read: {exc}") from None

    # ------------------------------------------------------------------ files
    async def read_text(self, filename: str) -> str:
        data, _, _, _ = await self._read(self.path_of(filename))
        return data.decode("utf-8", errors="replace")

    async def write_text(
        self, filename: str, text: str, *, expected_version: str | None = None
    ) -> str:
        try:
            return await self._write(self.path_of(filename), text.encode("utf-8"), expected_version)
        except _ConflictError as exc:
            raise MemoryStoreError(f"{filename} changed since it was read: {exc}") from None

    async def remove(self, filename: str) -> None:
        await self._backend().remove(self.path_of(filename))

    async def scan(self) -> ScanResult:
        """Every memory file, parsed and validated; unchanged files come from a cache.

        When no file was added, removed or changed since the previous scan, that scan's
        :class:`ScanResult` is returned again. The result becomes :attr:`last_scan`
        unless a scan that started later has completed first.
        """
        seq = next(self._scan_seq)
        # the parse cache and the scan it describes, taken together (both are replaced,
        # never mutated, so a concurrent scan cannot change them under this one)
        cache, base = self._parsed, self._parsed_scan
        if self._local:  # the comparison runs in the worker thread too
            raw, same = await asyncio.to_thread(_scan_local_compare, self.memdir, cache)
        else:
            raw = await self._scan_backend(cache)
            same = _unchanged(raw, cache)
        result = base if base is not None and same else self._merge(raw, cache)
        if seq > self._installed_seq:
            self._installed_seq = seq
            self.last_scan = result
        return result

    def refresh(self) -> asyncio.Task[ScanResult]:
        """Start a :meth:`scan` in the background and return its task.

        The task belongs to the store, not to the caller: it completes (and updates
        :attr:`last_scan`) even when the reply that started it ends first. Its failure is
        seen by whoever awaits it.
        """
        task = asyncio.get_running_loop().create_task(self.scan(), name="agentic-memory-scan")
        self._refreshes.add(task)
        task.add_done_callback(_forget(self._refreshes))
        return task

    async def settle(self) -> None:
        """Wait until the background scans started so far have finished."""
        pending = [t for t in self._refreshes if not t.done()]
        if pending:
            await asyncio.wait(pending)

    def _merge(
        self,
        raw: list[tuple[str, int, int, str | None]],
        cache: dict[str, tuple[int, int, MemoryFile]],
    ) -> ScanResult:
        files: list[MemoryFile] = []
        parsed: dict[str, tuple[int, int, MemoryFile]] = {}
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
        self._parsed, self._parsed_scan = parsed, result
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

    # ---------------------------------------------------------- backend glue
    def _backend(self) -> BackendBase:
        if self.backend is None:
            from mnemoscope.workspace import LocalBackend

            self.backend = LocalBackend()
        return self.backend

    async def _weak_version(self, path: str) -> str:
        if self._local:
            try:
                st = await asyncio.to_thread(os.stat, path)
            except FileNotFoundError:
                return _ABSENT
            return f"{st.st_mtime_ns}:{st.st_size}:i{st.st_ino}"
        return (await self._backend().stat(path, hash=False)).weak_version

    async def _read(self, path: str) -> tuple[bytes, str, str, str]:
        from mnemoscope.workspace import WorkspaceError

        try:
            res = await self._backend().read_file(path)
        except FileNotFoundError:
            raise
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot read {path}: {exc.message}") from None
        return res.data, res.stat.weak_version, res.stat.version, res.stat.path

    async def _write(self, path: str, data: bytes, expected_version: str | None) -> str:
        from mnemoscope.workspace import FileChangedError, WorkspaceError

        try:
            res = await self._backend().write_bytes(path, data, expected_version=expected_version)
        except FileChangedError as exc:
            raise _ConflictError(exc.message) from None
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot write {path}: {exc.message}") from None
        return res.stat.version

    async def _scan_backend(
        self, cache: dict[str, tuple[int, int, MemoryFile]]
    ) -> list[tuple[str, int, int, str | None]]:
        """Like :func:`_scan_local` through the backend: ``list`` per directory, reads only
        of files whose size or mtime changed."""
        backend = self._backend()
        out: list[tuple[str, int, int, str | None]] = []
        stack = [""]
        while stack and len(out) < _MAX_FILES:
            rel_dir = stack.pop()
            try:
                entries = await backend.list(posixpath.join(self.memdir, rel_dir))
            except FileNotFoundError:
                continue
            for e in entries:
                if e.name.startswith(".") or e.name.startswith(_TMP_PREFIX):
                    continue
                rel = rel_dir + e.name
                if e.type == "directory":
                    stack.append(rel + "/")
                    continue
                if e.type != "file" or not e.name.endswith(".md") or rel == INDEX_FILENAME:
                    continue
                cached = cache.get(rel)
                if (cached is not None and cached[:2] == (e.mtime_ns, e.size)) or (
                    e.size > MAX_MEMORY_FILE_BYTES
                ):
                    out.append((rel, e.mtime_ns, e.size, None))
                    continue
                try:
                    data, _, _, _ = await self._read(self.path_of(rel))
                except FileNotFoundError:
                    continue
                out.append((rel, e.mtime_ns, e.size, data.decode("utf-8", errors="replace")))
        return out


_ABSENT = "absent"


class _ConflictError(Exception):
    pass


def _forget(tasks: set[asyncio.Task[ScanResult]]) -> Any:
    def done(task: asyncio.Task[ScanResult]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here; whoever awaits the task still sees it

    return done


def _unchanged(
    raw: list[tuple[str, int, int, str | None]], cache: dict[str, tuple[int, int, MemoryFile]]
) -> bool:
    """True when ``raw`` lists exactly the cached files, each at its cached mtime and size."""
    if len(raw) != len(cache):
        return False
    for rel, mtime_ns, size, _ in raw:
        cached = cache.get(rel)
        if cached is None or cached[0] != mtime_ns or cached[1] != size:
            return False
    return True


def _is_local_backend(backend: object) -> bool:
    try:
        from mnemoscope.workspace import LocalBackend
    except ImportError:  # pragma: no cover - the workspace layer always ships LocalBackend
        return False
    return type(backend) is LocalBackend


def _scan_local_compare(
    memdir: str, cache: dict[str, tuple[int, int, MemoryFile]]
) -> tuple[list[tuple[str, int, int, str | None]], bool]:
    raw = _scan_local(memdir, cache)
    return raw, _unchanged(raw, cache)


def _scan_local(
    memdir: str, cache: dict[str, tuple[int, int, MemoryFile]]
) -> list[tuple[str, int, int, str | None]]:
    """Walk ``memdir`` (regular ``*.md`` files, no symlinks, no dot entries).

    Returns ``(relative name, mtime_ns, size, text)``; ``text`` is ``None`` when the
    cached parse is still current (same size and mtime) or the file is too large.
    """
    out: list[tuple[str, int, int, str | None]] = []
    stack = [("", memdir)]
    while stack:
        rel_dir, real_dir = stack.pop()
        try:
            it = os.scandir(real_dir)
        except (FileNotFoundError, NotADirectoryError):
            continue
        with it:
            for entry in it:
                name = entry.name
                if name.startswith(".") or name.startswith(_TMP_PREFIX):
                    continue
                rel = rel_dir + name
                if entry.is_dir(follow_symlinks=False):
                    stack.append((rel + "/", entry.path))
                    continue
                if not name.endswith(".md") or rel == INDEX_FILENAME:
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
                cached = cache.get(rel)
                if (cached is not None and cached[:2] == (st.st_mtime_ns, st.st_size)) or (
                    st.st_size > MAX_MEMORY_FILE_BYTES
                ):
                    out.append((rel, st.st_mtime_ns, st.st_size, None))
                    continue
                try:
                    with open(entry.path, "rb") as f:
                        data = f.read(MAX_MEMORY_FILE_BYTES + 1)
                except OSError:
                    continue
                out.append(
                    (rel, st.st_mtime_ns, st.st_size, data.decode("utf-8", errors="replace"))
                )
    return out
