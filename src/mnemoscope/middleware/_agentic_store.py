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
(:meth:`MemoryStore.read_index_cached`), and at most :data:`MAX_INDEX_BYTES` of it are read,
lines cut at :data:`MAX_INDEX_LINE_CHARS` characters (:class:`IndexSnapshot` says what
was cut).

Confinement: the memory directory must resolve strictly inside the workdir
(:meth:`MemoryStore.confine`, checked before every scan and by the middleware before
every model call and tool call), and every file is read or written at its real path
below that directory, refused when it is a symbolic link or not a regular file. So a
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
import errno
import functools
import itertools
import os
import posixpath
import stat as stat_mod
import threading
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.middleware._agentic_files import (
    INDEX_FILENAME,
    MEMORY_DIRNAME,
    MemoryFile,
    cut_index_text,
    parse_memory_file,
)
from mnemoscope.middleware._agentic_ranker import BM25Ranker, RankerDoc, doc_terms

if TYPE_CHECKING:
    from mnemoscope.workspace import BackendBase

MAX_MEMORY_FILE_BYTES = 256 * 1024
"""Memory files larger than this are reported invalid and not read for retrieval."""

MAX_INDEX_BYTES = 256 * 1024
"""At most this many bytes of ``MEMORY.md`` are read (the rest is reported as not shown)."""

MAX_INDEX_LINE_CHARS = 1_000
"""Index lines longer than this are cut (and reported as cut)."""

_TMP_PREFIX = ".mnemoscope-tmp-"
_MAX_FILES = 200_000
_MAX_DEPTH = 32
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class IndexSnapshot:
    """``MEMORY.md`` at one moment.

    Attributes:
        text: its content, bounded: at most :data:`MAX_INDEX_BYTES` bytes (whole lines),
            each line cut at :data:`MAX_INDEX_LINE_CHARS` characters.
        cheap_version: the weak version ``mtime_ns:size:i<inode>`` (what
            :meth:`MemoryStore.index_version` returns).
        version: the workspace's exact version token (``expected_version`` of a write)
            when the whole file was read; the weak version otherwise, which no write
            accepts, so a partly read index is never written back.
        real_path: the file's real path.
        size: the file's size in bytes.
        read_bytes: how many of them ``text`` holds (``size`` when nothing was left out).
        long_lines: how many lines were cut at :data:`MAX_INDEX_LINE_CHARS` characters.
    """

    text: str
    cheap_version: str
    version: str
    real_path: str
    size: int = 0
    read_bytes: int = 0
    long_lines: int = 0

    @property
    def bytes_cut(self) -> bool:
        """True when the end of the file was not read."""
        return self.read_bytes < self.size

    @property
    def complete(self) -> bool:
        """True when ``text`` is the whole file, unchanged (the model may count it as read)."""
        return not self.bytes_cut and not self.long_lines


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
        self._root: str | None = None  # the memory directory's real path, once confined
        self._work_real: str | None = None

    @property
    def is_local(self) -> bool:
        """True when the files are on the local disk (no backend, or a ``LocalBackend``)."""
        return self._local

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

    # ------------------------------------------------------------ confinement
    def confine_sync(self) -> str:
        """:meth:`confine` for the local disk, without an event loop (agent construction).

        Raises:
            MemoryStoreError: the directory is not confined (see :meth:`confine`).
            UserError: the store is not on the local disk (use :meth:`confine`).
        """
        if not self._local:
            raise UserError("MemoryStore.confine_sync: only for the local disk; await confine()")
        self._work_real, root = _confine_local(self.workdir, self.memdir)
        self._root = root
        return root

    async def confine(self) -> str:
        """Check where the memory directory really is; returns its real path.

        The directory (or, before it exists, the place it will be created) must resolve
        strictly inside the workdir: ``Memory`` may be a symbolic link to another
        directory of the workdir, never to one outside it, to the workdir itself or to
        something that is not a directory. Every file operation of the store then works
        at real paths below the returned one.

        Raises:
            MemoryStoreError: the directory resolves outside the workdir, or is not a
                directory; the message says where it points and how to fix it.
        """
        if self._local:
            work_real, root = await asyncio.to_thread(_confine_local, self.workdir, self.memdir)
        else:
            work_real, root = await self._confine_backend()
        self._work_real, self._root = work_real, root
        return root

    async def _confine_backend(self) -> tuple[str, str]:
        from mnemoscope.workspace import WorkspaceError

        backend = self._backend()
        try:
            work = await backend.stat(self.workdir, hash=False)
            mem = await backend.stat(self.memdir, hash=False)
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot check {self.memdir}: {exc.message}") from None
        work_real = posixpath.normpath(work.path if work.exists else self.workdir)
        if mem.exists:
            real = posixpath.normpath(mem.path)
        else:
            rel = posixpath.relpath(self.memdir, self.workdir)
            real = posixpath.join(work_real, rel)
        _check_confined(self.memdir, real, work_real)
        if mem.exists and mem.type != "directory":
            raise MemoryStoreError(_not_a_directory(self.memdir, real))
        return work_real, real

    async def _root_now(self) -> str:
        return self._root if self._root is not None else await self.confine()

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
        if self._local and await asyncio.to_thread(
            os.path.lexists, posixpath.join(root, INDEX_FILENAME)
        ):
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
            await self._write(INDEX_FILENAME, b"", expected_version=_ABSENT)
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
            data, cheap, exact, real = await self._read(INDEX_FILENAME, max_bytes=MAX_INDEX_BYTES)
        except FileNotFoundError:
            snap = IndexSnapshot("", "absent", _ABSENT, self.index_path)
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
            data, st = await asyncio.to_thread(_read_prefix, root, INDEX_FILENAME, MAX_INDEX_BYTES)
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
        await self._backend().remove(_below(root, filename), roots=[root])

    async def scan(self) -> ScanResult:
        """Every memory file, parsed and validated; unchanged files come from a cache.

        When no file was added, removed or changed since the previous scan, that scan's
        :class:`ScanResult` is returned again. The result becomes :attr:`last_scan`
        unless a scan that started later has completed first.
        """
        seq = next(self._scan_seq)
        root = await self.confine()  # never walk a directory that moved out of the workdir
        # the parse cache and the scan it describes, taken together (both are replaced,
        # never mutated, so a concurrent scan cannot change them under this one)
        cache, base = self._parsed, self._parsed_scan
        if self._local:  # the comparison runs in the worker thread too
            raw, same = await asyncio.to_thread(_scan_local_compare, root, cache)
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
        # ``path`` is the index; its own entry, a link included, never what a link points to
        root = await self._root_now()
        real = _below(root, posixpath.relpath(path, self.memdir))
        if self._local:
            try:
                st = await asyncio.to_thread(os.lstat, real)
            except (FileNotFoundError, NotADirectoryError):
                return _ABSENT
            return f"{st.st_mtime_ns}:{st.st_size}:i{st.st_ino}"
        from mnemoscope.workspace import WorkspaceError

        try:
            return (await self._backend().stat(real, roots=[root], hash=False)).weak_version
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot stat {path}: {exc.message}") from None

    async def _read(self, rel: str, *, max_bytes: int) -> tuple[bytes, str, str, str]:
        """Read ``rel`` (below the memory directory) at its real path, refusing links."""
        from mnemoscope.workspace import WorkspaceError

        root = await self._root_now()
        path = _below(root, rel)
        try:
            res = await self._backend().read_file(path, roots=[root], max_bytes=max_bytes)
        except FileNotFoundError:
            raise
        except WorkspaceError as exc:
            if exc.code == "too_large":
                raise _TooLargeError(f"cannot read {self.path_of(rel)}: {exc.message}") from None
            raise MemoryStoreError(f"cannot read {self.path_of(rel)}: {exc.message}") from None
        if res.stat.path != path:
            # a link (even to another memory file) or a directory that moved: not shown
            raise MemoryStoreError(_linked(self.path_of(rel), res.stat.path))
        return res.data, res.stat.weak_version, res.stat.version, res.stat.path

    async def _write(self, rel: str, data: bytes, expected_version: str | None) -> str:
        from mnemoscope.workspace import FileChangedError, WorkspaceError

        # checked right before each write: the backend resolves ``roots`` itself, so a
        # directory swapped for a link since the last check must not become the root
        root = await self.confine()
        try:
            res = await self._backend().write_bytes(
                _below(root, rel), data, roots=[root], expected_version=expected_version
            )
        except FileChangedError as exc:
            raise _ConflictError(exc.message) from None
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot write {self.path_of(rel)}: {exc.message}") from None
        return res.stat.version

    async def _scan_backend(
        self, cache: dict[str, tuple[int, int, MemoryFile]]
    ) -> list[tuple[str, int, int, str | None]]:
        """Like :func:`_scan_local` through the backend: ``list`` per directory, reads only
        of files whose size or mtime changed."""
        from mnemoscope.workspace import WorkspaceError

        backend = self._backend()
        root = await self._root_now()
        out: list[tuple[str, int, int, str | None]] = []
        stack = [""]
        while stack and len(out) < _MAX_FILES:
            rel_dir = stack.pop()
            try:
                entries = await backend.list(_below(root, rel_dir), roots=[root])
            except FileNotFoundError:
                continue
            except WorkspaceError as exc:
                raise MemoryStoreError(f"cannot list {self.memdir}: {exc.message}") from None
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
                    data, _, _, _ = await self._read(rel, max_bytes=MAX_MEMORY_FILE_BYTES)
                except (FileNotFoundError, MemoryStoreError):
                    continue  # removed, grown or replaced by a link since the listing
                out.append((rel, e.mtime_ns, e.size, data.decode("utf-8", errors="replace")))
        return out


_ABSENT = "absent"


class _ConflictError(Exception):
    pass


class _TooLargeError(MemoryStoreError):
    pass


def _strictly_within(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def _below(root: str, rel: str) -> str:
    return posixpath.join(root, rel) if rel else root


def _check_confined(memdir: str, real: str, work_real: str) -> None:
    if not _strictly_within(real, work_real):
        raise MemoryStoreError(
            f"the memory directory {memdir} resolves to {real}, which is not inside the "
            f"workdir {work_real}: a symbolic link there would let the agent read and write "
            f"outside its workdir. Make {memdir} a real directory inside the workdir "
            "(remove the link) or choose another workdir."
        )


def _not_a_directory(memdir: str, real: str) -> str:
    where = "" if real == memdir else f" (it resolves to {real})"
    return f"the memory directory {memdir} is not a directory{where}; remove it or rename it"


def _linked(path: str, real: str) -> str:
    return (
        f"{path} is a symbolic link (to {real}) or moved; memory files must be regular files "
        "in the memory directory, so it is not read. Replace the link with the file itself."
    )


def _confine_local(workdir: str, memdir: str) -> tuple[str, str]:
    work_real = os.path.realpath(workdir)
    real = os.path.realpath(memdir)
    _check_confined(memdir, real, work_real)
    if os.path.lexists(memdir) and not os.path.isdir(real):
        raise MemoryStoreError(_not_a_directory(memdir, real))
    return work_real, real


def _open_root(root: str) -> int:
    """Open the memory directory, checking the descriptor is really ``root`` (no link)."""
    from mnemoscope.workspace._fsops import FsError, fd_path

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


def _read_prefix(root: str, rel: str, limit: int) -> tuple[bytes, os.stat_result]:
    """The first ``limit`` bytes of the regular file ``root/rel`` (no link anywhere below
    ``root``) and its ``fstat``."""
    fd = _open_root(root)
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
                raise MemoryStoreError(_linked(posixpath.join(root, rel), "elsewhere")) from None
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
    root: str, cache: dict[str, tuple[int, int, MemoryFile]]
) -> list[tuple[str, int, int, str | None]]:
    """Walk the memory directory ``root`` (its real path): regular ``*.md`` files only.

    Every directory and file is opened relative to its parent's descriptor with
    ``O_NOFOLLOW``, and the top one is checked to really be ``root``, so no symbolic link
    (planted before or during the walk) leads outside it. Dot entries are skipped.

    Returns ``(relative name, mtime_ns, size, text)``; ``text`` is ``None`` when the
    cached parse is still current (same size and mtime) or the file is too large.
    """
    out: list[tuple[str, int, int, str | None]] = []
    try:
        top = _open_root(root)
    except (FileNotFoundError, NotADirectoryError):
        return out
    _walk(top, "", cache, out, 0)
    return out


def _walk(
    dfd: int,
    rel_dir: str,
    cache: dict[str, tuple[int, int, MemoryFile]],
    out: list[tuple[str, int, int, str | None]],
    depth: int,
) -> None:
    """Scan the open directory ``dfd`` (closed here), then its subdirectories one by one
    (one descriptor per level is open at a time)."""
    subdirs: list[str] = []
    try:
        with os.scandir(dfd) as it:
            for entry in it:
                name = entry.name
                if name.startswith(".") or name.startswith(_TMP_PREFIX):
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
                if rel == INDEX_FILENAME or len(out) >= _MAX_FILES:
                    continue
                cached = cache.get(rel)
                if (cached is not None and cached[:2] == (st.st_mtime_ns, st.st_size)) or (
                    st.st_size > MAX_MEMORY_FILE_BYTES
                ):
                    out.append((rel, st.st_mtime_ns, st.st_size, None))
                    continue
                text = _read_entry(dfd, name)
                if text is not None:
                    out.append((rel, st.st_mtime_ns, st.st_size, text))
        if depth >= _MAX_DEPTH:
            return
        for name in subdirs:
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            except OSError:
                continue  # replaced by a link or removed since the listing
            _walk(sub, f"{rel_dir}{name}/", cache, out, depth + 1)
    finally:
        os.close(dfd)


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
