"""Where one memory directory is and how its bytes are reached: the base of
:class:`~mnemoscope.memory.markdown.MemoryStore`.

:class:`MemoryDirectory` knows the workdir, the directory below it and the workspace
backend the files live in (the local disk when none is given). It confines the directory
(:meth:`MemoryDirectory.confine`: it must resolve strictly inside the workdir), and every
read, write and listing walk goes to real paths below the confined directory, refusing
symbolic links. It caches nothing about the files; the store above it does (index
snapshots, scans, the ranker).
"""

from __future__ import annotations

import os
import posixpath
import time
from typing import TYPE_CHECKING

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory.markdown._files import INDEX_FILENAME, MEMORY_DIRNAME
from mnemoscope.memory.markdown._paths import (
    check_confined,
    confine_local,
    not_a_directory,
    read_inline,
)
from mnemoscope.memory.markdown._walk import (
    MAX_FILES,
    MAX_MEMORY_FILE_BYTES,
    TMP_PREFIX,
    DirMark,
    ParseCache,
    RawEntry,
    bump_generation,
    is_racy,
    needs_no_read,
)
from mnemoscope.memory.markdown._walk import linked as _linked

if TYPE_CHECKING:
    from mnemoscope.workspace import BackendBase


class MemoryDirectory:
    """``<workdir>/<memory_dirname>`` on a workspace backend.

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
        self._work_real, root = confine_local(self.workdir, self.memdir)
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
            # a few system calls (see _confine_local): a thread hop would cost more
            work_real, root = confine_local(self.workdir, self.memdir)
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
        check_confined(self.memdir, real, work_real)
        if mem.exists and mem.type != "directory":
            raise MemoryStoreError(not_a_directory(self.memdir, real))
        return work_real, real

    async def _root_now(self) -> str:
        return self._root if self._root is not None else await self.confine()

    @property
    def resolved_backend(self) -> BackendBase:
        """The backend the files live in (a ``LocalBackend`` when none was given)."""
        return self._backend()

    @property
    def backend_key(self) -> str:
        """The file namespace of this store (the backend's ``key``)."""
        return self._backend().key

    # ---------------------------------------------------------- backend glue
    def _backend(self) -> BackendBase:
        if self.backend is None:
            from mnemoscope.workspace import LocalBackend

            self.backend = LocalBackend()
        return self.backend

    async def _weak_version(self, path: str) -> str:
        # ``path`` is the index; its own entry, a link included, never what a link points to
        root = await self._root_now()
        real = below(root, posixpath.relpath(path, self.memdir))
        if self._local:
            try:  # one lstat, inline: it runs before every reasoning step
                st = os.lstat(real)
            except (FileNotFoundError, NotADirectoryError):
                return ABSENT
            return f"{st.st_mtime_ns}:{st.st_size}:i{st.st_ino}"
        from mnemoscope.workspace import WorkspaceError

        try:
            return (await self._backend().stat(real, roots=[root], hash=False)).weak_version
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot stat {path}: {exc.message}") from None

    async def _read(
        self, rel: str, *, max_bytes: int, inline: bool = False
    ) -> tuple[bytes, str, str, str]:
        """Read ``rel`` (below the memory directory) at its real path, refusing links.

        ``inline`` (local disk only): the same read as the backend's, without the hop to
        a worker thread. For ``MEMORY.md`` (bounded, read when it changed): the prompt is
        then built without yielding to the event loop, so a scan started by the same
        reply does not begin (and compete for the GIL) until the prompt is ready.
        """
        from mnemoscope.workspace import WorkspaceError

        root = await self._root_now()
        path = below(root, rel)
        try:
            if inline and self._local:
                res = read_inline(path, root, max_bytes)
            else:
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
                below(root, rel), data, roots=[root], expected_version=expected_version
            )
        except FileChangedError as exc:
            raise _ConflictError(exc.message) from None
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot write {self.path_of(rel)}: {exc.message}") from None
        finally:
            bump_generation((self.backend_key, root))  # after the write: a scan now sees it
        return res.stat.version

    async def _scan_backend(
        self, cache: ParseCache
    ) -> tuple[list[RawEntry], tuple[DirMark, ...] | None, bool]:
        """Like the local walk through the backend: ``list`` per directory, reads only of
        files whose size or mtime changed. Returns the files, the directories' marks
        (``None`` when the backend reports no mtimes) and whether one is racy."""
        from mnemoscope.workspace import WorkspaceError

        backend = self._backend()
        root = await self._root_now()
        out: list[RawEntry] = []
        marks: list[DirMark] = []
        racy = False
        try:  # the top directory's mark, taken before its listing (a subdirectory's comes
            # from its parent's listing, also before its own)
            top = await backend.stat(root, roots=[root], hash=False)
        except WorkspaceError as exc:
            raise MemoryStoreError(f"cannot stat {self.memdir}: {exc.message}") from None
        usable = top.exists and top.mtime_ns > 0
        stack = [("", top.mtime_ns, top.ino, time.time_ns())]
        while stack and len(out) < MAX_FILES:
            rel_dir, mtime_ns, ino, taken = stack.pop()
            marks.append((rel_dir.rstrip("/"), mtime_ns, 0, ino))
            racy = racy or is_racy(mtime_ns, 0, taken)
            try:
                entries = await backend.list(below(root, rel_dir), roots=[root])
            except FileNotFoundError:
                continue
            except WorkspaceError as exc:
                raise MemoryStoreError(f"cannot list {self.memdir}: {exc.message}") from None
            listed = time.time_ns()
            for e in entries:
                if e.name.startswith(".") or e.name.startswith(TMP_PREFIX):
                    continue
                rel = rel_dir + e.name
                if e.type == "directory":
                    stack.append((rel + "/", e.mtime_ns, e.ino, listed))
                    usable = usable and e.mtime_ns > 0
                    continue
                if e.type != "file" or not e.name.endswith(".md") or rel == INDEX_FILENAME:
                    continue
                if needs_no_read(cache, rel, e.mtime_ns, e.size):
                    out.append((rel, e.mtime_ns, e.size, None))
                    continue
                try:
                    data, _, _, _ = await self._read(rel, max_bytes=MAX_MEMORY_FILE_BYTES)
                except (FileNotFoundError, MemoryStoreError):
                    continue  # removed, grown or replaced by a link since the listing
                out.append((rel, e.mtime_ns, e.size, data.decode("utf-8", errors="replace")))
        return out, (tuple(marks) if usable else None), racy


ABSENT = "absent"
"""The version of a file that does not exist (a write that must create it)."""


class _ConflictError(Exception):
    """The file is no longer at the version the write expected."""


class _TooLargeError(MemoryStoreError):
    """The file is larger than the read allows."""


def below(root: str, rel: str) -> str:
    return posixpath.join(root, rel) if rel else root


def _is_local_backend(backend: object) -> bool:
    try:
        from mnemoscope.workspace import LocalBackend
    except ImportError:  # pragma: no cover - the workspace layer always ships LocalBackend
        return False
    return type(backend) is LocalBackend
