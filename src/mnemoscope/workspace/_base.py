"""Backends (where files live and commands run) and workspaces (what creates a backend).

Every file operation takes ``roots``: when given, the backend refuses to open, create,
change or list anything whose real location is outside those directories, checked on
the opened descriptor at the moment of the operation (see ``_fsops``). The file tools
pass the permission context's working directories, so a symlink swapped in after the
permission check still cannot lead outside.

Errors::

    WorkspaceError (MnemoscopeError)      code + message readable by a model
    ├── PathDeniedError                   outside the roots, a device file, a bad path
    ├── WorkspaceFileNotFoundError        also a FileNotFoundError
    ├── FileChangedError                  expected_version did not match (read again)
    └── EditMatchError                    old_string not found / not unique
"""

from __future__ import annotations

import builtins
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mnemoscope.errors import (
    EditMatchError,
    FileChangedError,
    PathDeniedError,
    UserError,
    WorkspaceError,
    WorkspaceFileNotFoundError,
)
from mnemoscope.workspace import _fsops
from mnemoscope.workspace._fsops import ABSENT
from mnemoscope.workspace._fsops_search import GREP_TIME_LIMIT

_CLASSES: dict[str, type[WorkspaceError]] = {
    "denied": PathDeniedError,
    "invalid": PathDeniedError,
    "not_found": WorkspaceFileNotFoundError,
    "conflict": FileChangedError,
    "no_match": EditMatchError,
    "multiple_matches": EditMatchError,
}


def make_error(code: str, message: str) -> WorkspaceError:
    """The :class:`WorkspaceError` subclass for a helper error code."""
    return _CLASSES.get(code, WorkspaceError)(message, code)


def helper_request(op: str, args: dict[str, Any]) -> str:
    """One request to the ``_fsops`` helper, as the JSON text ``_fsops.handle`` reads."""
    return json.dumps({"op": op, "args": _fsops.to_json(args)})


def helper_answer(answer: str | bytes) -> dict[str, Any]:
    """The result in one answer of the ``_fsops`` helper.

    Raises:
        WorkspaceError: the error the helper reports, as its subclass (see :func:`make_error`).
    """
    res = json.loads(answer)
    if not res["ok"]:
        raise make_error(res["code"], res["message"])
    result: dict[str, Any] = _fsops.from_json(res["result"])
    return result


@dataclass(frozen=True)
class FileStat:
    """What :meth:`BackendBase.stat` returns.

    Attributes:
        path: the real path (symlinks resolved) when the file exists, else the path asked.
        exists: whether it exists.
        type: ``"file"``, ``"directory"`` or ``""``.
        size: bytes.
        mtime_ns: modification time.
        version: ``mtime_ns:size:sha256-prefix`` of a file, ``"absent"`` when missing;
            pass it back as ``expected_version`` to write only if nothing changed. From
            ``stat(hash=False)`` it is the weak ``mtime_ns:size:i<inode>`` (see
            :attr:`weak_version`), which ``expected_version`` refuses.
        ino: inode number (0 when missing).
    """

    path: str
    exists: bool
    type: str = ""
    size: int = 0
    mtime_ns: int = 0
    version: str = ABSENT
    ino: int = 0

    @property
    def weak_version(self) -> str:
        """``mtime_ns:size:i<inode>`` (``"absent"`` when missing): a change token that needs
        no read of the file. Every write of the workspace replaces the inode, so it changes
        with each of them; an in-place edit by another program that keeps the size within
        one timestamp tick would go unseen, hence only for change detection."""
        return f"{self.mtime_ns}:{self.size}:i{self.ino}" if self.exists else ABSENT

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FileStat:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class FileContent:
    """Bytes of a file and the stat taken from the same open descriptor."""

    data: bytes
    stat: FileStat


@dataclass(frozen=True)
class WriteResult:
    stat: FileStat
    created: bool
    replacements: int = 0
    line: int = 0


@dataclass(frozen=True)
class DirEntry:
    """One entry of :meth:`BackendBase.list` (not following symlinks).

    Attributes:
        name: the entry's name.
        type: ``"file"``, ``"directory"``, ``"symlink"`` or ``"other"``.
        size: bytes.
        mtime_ns: modification time (0 from a backend that does not report it).
        ino: inode number (0 from a backend that does not report it).
    """

    name: str
    type: str
    size: int
    mtime_ns: int = 0
    ino: int = 0

    @property
    def weak_version(self) -> str:
        """Same as :attr:`FileStat.weak_version`, for change detection during scans."""
        return f"{self.mtime_ns}:{self.size}:i{self.ino}"


@dataclass(frozen=True)
class GrepMatch:
    """One matching line; ``text`` shows an undecodable byte as U+FFFD."""

    path: str
    line: int
    text: str


@dataclass(frozen=True)
class GrepResult:
    """What :meth:`BackendBase.grep` returns.

    Attributes:
        matches: the matching lines, in file order.
        truncated: stopped at ``limit`` matches.
        files_searched: files actually searched (not those skipped).
        skipped: ``(path, reason)`` of files that were not searched (too large, binary,
            not readable, past the walk limit); the first 100.
        files_skipped: how many files were skipped in all.
    """

    matches: list[GrepMatch]
    truncated: bool
    files_searched: int
    skipped: list[tuple[str, str]] = field(default_factory=list)
    files_skipped: int = 0


@dataclass(frozen=True)
class ExecResult:
    """Outcome of :meth:`BackendBase.exec`; ``timed_out`` means the command was killed."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


Roots = Sequence[str] | None


class BackendBase(ABC):
    """Where files live and commands run. All paths are absolute inside the backend;
    relative paths are resolved against :attr:`cwd` by :meth:`abspath`.

    Subclasses implement :meth:`_call` (run one ``_fsops`` operation) and :meth:`exec`.
    """

    name: str = "backend"

    def __init__(self, cwd: str, home: str | None = None) -> None:
        self.cwd = cwd
        self.home = home or cwd

    @property
    def key(self) -> str:
        """Identifies the file namespace (used to key read-before-write tracking)."""
        return f"{self.name}:{id(self)}"

    def abspath(self, path: str) -> str:
        """Make ``path`` absolute: ``~`` is the backend's home, relative is below ``cwd``."""
        if path == "~" or path.startswith("~/"):
            path = self.home + path[1:]
        return path if path.startswith("/") else os.path.join(self.cwd, path)

    @abstractmethod
    async def _call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one operation; raise :class:`WorkspaceError` on failure."""

    @abstractmethod
    async def exec(self, cmd: str, *, timeout: float = 60.0) -> ExecResult:  # noqa: ASYNC109 - exec(cmd, timeout) is the API
        """Run a shell command in :attr:`cwd`; kill it after ``timeout`` seconds."""

    async def aclose(self) -> None:
        """Release resources held by the backend (idempotent)."""

    @staticmethod
    def _roots(roots: Roots) -> list[str] | None:
        return None if roots is None else [str(r) for r in roots]

    # ---------------------------------------------------------------- reading
    async def read_file(
        self, path: str, *, roots: Roots = None, max_bytes: int | None = None
    ) -> FileContent:
        """Bytes and stat of a regular file (refuses devices, FIFOs, sockets)."""
        res = await self._call(
            "read",
            {"path": self.abspath(path), "roots": self._roots(roots), "max_bytes": max_bytes},
        )
        return FileContent(res["data"], FileStat.from_dict(res["stat"]))

    async def read_bytes(
        self, path: str, *, roots: Roots = None, max_bytes: int | None = None
    ) -> bytes:
        return (await self.read_file(path, roots=roots, max_bytes=max_bytes)).data

    async def read_text(
        self, path: str, *, roots: Roots = None, max_bytes: int | None = None
    ) -> str:
        """Decoded text (UTF-8, UTF-8 BOM, UTF-16 BOM; U+FFFD for each byte that does not
        decode, the rest stays UTF-8); line endings kept."""
        from mnemoscope.workspace._fsops import FsError, decode_text

        data = await self.read_bytes(path, roots=roots, max_bytes=max_bytes)
        try:
            return decode_text(data)[0]
        except FsError as exc:
            raise make_error(exc.code, f"{path}: {exc.message}") from None

    async def stat(self, path: str, *, roots: Roots = None, hash: bool = True) -> FileStat:
        """Stat a file or directory (``exists=False`` when missing, never an error).

        Args:
            path: the path.
            roots: confine to these directories.
            hash: read and hash the file for the exact ``version`` (usable as
                ``expected_version``). ``False`` reads nothing: ``version`` is then the
                weak ``mtime_ns:size:i<inode>`` token, enough to notice changes.
        """
        res = await self._call(
            "stat", {"path": self.abspath(path), "roots": self._roots(roots), "hash": hash}
        )
        return FileStat.from_dict(res)

    async def exists(self, path: str, *, roots: Roots = None) -> bool:
        res = await self._call(
            "stat", {"path": self.abspath(path), "roots": self._roots(roots), "hash": False}
        )
        return bool(res["exists"])

    async def list(self, path: str, *, roots: Roots = None) -> list[DirEntry]:
        """Entries of a directory, sorted by name, with size and mtime (one call, no reads).

        A name with undecodable bytes or control characters comes back escaped
        (``bad\\xff.txt``), as do paths from :meth:`glob` and :meth:`grep`."""
        res = await self._call("list", {"path": self.abspath(path), "roots": self._roots(roots)})
        fields = DirEntry.__dataclass_fields__
        return [DirEntry(**{k: v for k, v in e.items() if k in fields}) for e in res["entries"]]

    async def glob(
        self, pattern: str, path: str | None = None, *, roots: Roots = None, limit: int = 1000
    ) -> tuple[builtins.list[str], bool]:
        """Paths of files matching ``pattern`` below ``path``; returns (paths, truncated)."""
        res = await self._call(
            "glob",
            {
                "pattern": pattern,
                "path": self.abspath(path or self.cwd),
                "roots": self._roots(roots),
                "limit": limit,
            },
        )
        return list(res["paths"]), bool(res["truncated"])

    async def grep(
        self,
        pattern: str,
        path: str | None = None,
        *,
        roots: Roots = None,
        glob: str | None = None,
        ignore_case: bool = False,
        limit: int = 200,
        time_limit: float = GREP_TIME_LIMIT,
    ) -> GrepResult:
        """Lines matching the regular expression ``pattern`` in a file or below a directory.

        Files are decoded as :meth:`read_text` does (UTF-16 with a BOM included); files
        not searched are listed in :attr:`GrepResult.skipped` with the reason.

        Raises:
            WorkspaceError: code ``too_slow`` when the search runs over ``time_limit``
                seconds (a pattern that backtracks catastrophically, or a huge tree); the
                message names the file and line it stopped at.
        """
        res = await self._call(
            "grep",
            {
                "pattern": pattern,
                "path": self.abspath(path or self.cwd),
                "roots": self._roots(roots),
                "glob": glob,
                "ignore_case": ignore_case,
                "limit": limit,
                "time_limit": time_limit,
            },
        )
        return GrepResult(
            [GrepMatch(**m) for m in res["matches"]],
            bool(res["truncated"]),
            int(res["files_searched"]),
            [(str(p), str(why)) for p, why in res.get("skipped", [])],
            int(res.get("files_skipped", 0)),
        )

    # ---------------------------------------------------------------- writing
    async def write_bytes(
        self,
        path: str,
        data: bytes,
        *,
        roots: Roots = None,
        expected_version: str | None = None,
        create_parents: bool = True,
    ) -> WriteResult:
        """Atomically replace the file. With ``expected_version`` the write happens only
        if the file is still at that version (``"absent"``: only if it does not exist)."""
        res = await self._call(
            "write",
            {
                "path": self.abspath(path),
                "data": bytes(data),
                "roots": self._roots(roots),
                "expected_version": expected_version,
                "create_parents": create_parents,
            },
        )
        return _write_result(res)

    async def write_text(
        self,
        path: str,
        text: str,
        *,
        roots: Roots = None,
        expected_version: str | None = None,
        encoding: str | None = None,
        preserve_line_endings: bool = True,
        create_parents: bool = True,
    ) -> WriteResult:
        """Atomically write text, keeping an existing file's encoding and CRLF endings."""
        res = await self._call(
            "write_text",
            {
                "path": self.abspath(path),
                "text": text,
                "roots": self._roots(roots),
                "expected_version": expected_version,
                "encoding": encoding,
                "preserve_line_endings": preserve_line_endings,
                "create_parents": create_parents,
            },
        )
        return _write_result(res)

    async def edit(
        self,
        path: str,
        old_string: str,
        new_string: str,
        *,
        replace_all: bool = False,
        roots: Roots = None,
        expected_version: str | None = None,
    ) -> WriteResult:
        """Replace ``old_string`` (exactly once unless ``replace_all``) under the file lock."""
        res = await self._call(
            "edit",
            {
                "path": self.abspath(path),
                "old_string": old_string,
                "new_string": new_string,
                "replace_all": replace_all,
                "roots": self._roots(roots),
                "expected_version": expected_version,
            },
        )
        return _write_result(res)

    async def remove(self, path: str, *, roots: Roots = None, recursive: bool = False) -> None:
        await self._call(
            "remove",
            {"path": self.abspath(path), "roots": self._roots(roots), "recursive": recursive},
        )

    async def mkdir(self, path: str, *, roots: Roots = None, parents: bool = True) -> None:
        await self._call(
            "mkdir", {"path": self.abspath(path), "roots": self._roots(roots), "parents": parents}
        )


def _write_result(res: dict[str, Any]) -> WriteResult:
    return WriteResult(
        stat=FileStat.from_dict(res["stat"]),
        created=bool(res.get("created")),
        replacements=int(res.get("replacements", 0)),
        line=int(res.get("line", 0)),
    )


class WorkspaceBase(ABC):
    """An environment with a working directory and a backend.

    Use ``async with`` or call :meth:`initialize` and :meth:`close` yourself.
    """

    tools_factory: ClassVar[Callable[[BackendBase], Sequence[Any]] | None] = None
    """Builds the tools of :meth:`list_tools` over the backend.

    The tools live in a higher layer than workspaces, so this layer cannot name them:
    importing ``mnemoscope.tool`` sets this to ``mnemoscope.tool.file_tools``. A subclass
    may set its own (e.g. read-only tools for a read-only workspace).
    """

    def __init__(self) -> None:
        self._backend: BackendBase | None = None

    @property
    @abstractmethod
    def workdir(self) -> str:
        """The working directory, as a path inside the workspace."""

    @abstractmethod
    async def initialize(self) -> None:
        """Create or connect to the environment (idempotent)."""

    @abstractmethod
    async def close(self) -> None:
        """Release what :meth:`initialize` created (idempotent)."""

    async def aclose(self) -> None:
        """The same as :meth:`close`: every mnemoscope resource answers to both spellings."""
        await self.close()

    def get_backend(self) -> BackendBase:
        """The backend of this workspace; :meth:`initialize` must have been awaited."""
        if self._backend is None:
            raise UserError(
                f"{type(self).__name__} is not initialized: await workspace.initialize() "
                "(or use 'async with') before get_backend()"
            )
        return self._backend

    async def list_tools(self) -> list[Any]:
        """``Read``, ``Write``, ``Edit``, ``Glob`` and ``Grep`` bound to this backend.

        Built by :attr:`tools_factory` (``mnemoscope.tool.file_tools``), for a toolkit:
        ``Toolkit(tools=await workspace.list_tools())``.

        Raises:
            UserError: no tools factory is registered (``mnemoscope.tool`` not imported).
        """
        factory = type(self).tools_factory
        if factory is None:
            raise UserError(
                f"{type(self).__name__}.list_tools() needs the tool layer: import "
                "mnemoscope.tool first (e.g. from mnemoscope.tool import Toolkit), or build "
                "the tools with mnemoscope.tool.file_tools(workspace.get_backend())"
            )
        return list(factory(self.get_backend()))

    async def __aenter__(self) -> WorkspaceBase:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
