"""Confined, crash-safe file operations (standard library only).

This file, ``_fsops_search.py`` (``glob``, ``grep``), ``_fsops_write.py`` (writes,
edits, removal) and ``_fsops_text.py`` (decoding, lines, names) are the one
implementation of every file operation of the workspace backends (:data:`HELPER_FILES`).
:class:`~mnemoscope.workspace.LocalBackend` calls :func:`dispatch` in a thread (``grep``
in a helper process it can kill, see ``_grep_worker``); the sandboxed backends
(Bubblewrap, Docker, E2B) put the files (:func:`helper_files`) in one directory of the
sandbox and run this one there as a helper (``python3 _fsops.py serve`` speaks JSON
lines on stdin/stdout, ``python3 _fsops.py once '<json>'`` answers one request). They
import nothing from mnemoscope so that they run under ``python -I -S`` anywhere.

Guarantees:

* **Confinement.** With ``roots`` given, nothing outside those directories is opened,
  created, changed or listed. Every operation opens the parent directory, checks the
  real location of the *opened descriptor* (``/proc/self/fd``), then works relative to
  that descriptor with ``O_NOFOLLOW`` on the last component. A symlink swapped in after
  the permission check therefore cannot redirect the operation outside the roots.
* **Regular files only.** Devices, FIFOs and sockets are refused even without roots.
* **Atomic writes.** Temp file in the same directory, ``fsync``, ``rename``, directory
  ``fsync``: a crash leaves the old or the new content, never a torn file, and a write
  that returned survives a power loss. These two ``fsync`` calls are most of the cost of
  a write on a busy disk (0.2 ms each on an idle ext4 disk, 2 ms and more while other
  processes write to it); nothing else is done twice.
* **Version tokens.** ``mtime_ns:size:sha256[:16]`` (exact; what ``expected_version``
  takes) or, from ``stat(hash=False)`` and ``list``, the weak ``mtime_ns:size:i<inode>``
  that detects changes without reading the file (every write here replaces the inode).
  A version check compares size and mtime first and hashes (streaming, in 1 MiB
  chunks) only when they match, so refusing a write to an unread file reads nothing.
* **Bounded reads.** A text write reads at most ``TEXT_SNIFF_BYTES`` (64 KiB) of the old
  file (for its encoding and line endings), a byte write none; an edit refuses files
  over ``MAX_EDIT_BYTES`` (32 MiB) before reading them (``_fsops_write``).
* **Serialised writers.** Writes and edits hold ``flock`` on the parent directory, which
  works across processes, threads and sandboxes sharing the directory, so concurrent
  edits lose nothing and version checks (compare-and-swap) are exact.
* **Text fidelity.** Encoding (UTF-8, UTF-8 with BOM, UTF-16 with BOM) and line endings
  (CRLF stays CRLF) of an existing file are kept by text writes and edits. A file that is
  not valid UTF-8 is still UTF-8 with its stray bytes kept as they are (not Latin-1):
  edits write them back unchanged and new text is UTF-8 (see ``_fsops_text``).
* **Safe names.** Every path or name that leaves an operation (results and error
  messages) has undecodable bytes and control characters backslash-escaped
  (:func:`show`), so it can always be serialised.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import hashlib
import importlib
import json
import os
import stat as stat_mod
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

HELPER_PACKAGE = "mnemoscope_fsops_helper"
"""The package the helper's files form when ``_fsops.py`` runs as a script (the sandbox
helper), so that they import each other relatively there as inside mnemoscope."""

if not __package__:  # run as a script (python3 -I -S _fsops.py): PEP 366
    __package__ = HELPER_PACKAGE
    _package = ModuleType(HELPER_PACKAGE)
    _package.__path__ = [os.path.dirname(os.path.abspath(__file__))]
    _package._fsops = sys.modules[__name__]  # type: ignore[attr-defined]
    sys.modules[HELPER_PACKAGE] = _package
    sys.modules[f"{HELPER_PACKAGE}._fsops"] = sys.modules[__name__]

from ._fsops_text import decode_display, show  # noqa: E402 - after the package above

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
MAX_SYMLINK_HOPS = 8
TMP_PREFIX = ".mnemoscope-tmp-"
ABSENT = "absent"
"""Version token of a file that does not exist (``expected_version`` for a creation)."""
HASH_CHUNK_BYTES = 1 << 20
"""Files are hashed (for version tokens) in chunks of this size."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class FsError(Exception):
    """An operation failed; ``code`` is machine-readable, ``message`` is for the model."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ------------------------------------------------------------------ paths and roots
def check_path(path: Any) -> str:
    """Validate an absolute path: no NUL byte, bounded length."""
    if not isinstance(path, str) or not path:
        raise FsError("invalid", "the path is empty")
    if "\x00" in path:
        raise FsError("invalid", f"the path {path[:60]!r}... contains a NUL byte")
    raw = os.fsencode(path)
    if len(raw) > MAX_PATH_BYTES:
        raise FsError("invalid", f"the path is {len(raw)} bytes long (limit {MAX_PATH_BYTES})")
    for part in raw.split(b"/"):
        if len(part) > MAX_NAME_BYTES:
            raise FsError(
                "invalid", f"a path component is {len(part)} bytes long (limit {MAX_NAME_BYTES})"
            )
    if not os.path.isabs(path):
        raise FsError("invalid", f"the path {path!r} is not absolute")
    return path


def _roots(roots: list[str] | None) -> list[str] | None:
    if roots is None:
        return None
    return [os.path.realpath(check_path(r)) for r in roots]


def _within(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _outside(shown: str, real: str, roots: list[str]) -> FsError:
    where = "" if real == shown else f" (it resolves to {real})"
    return FsError(
        "denied",
        f"{shown} is outside the allowed directories{where}; allowed: {', '.join(roots)}",
    )


def _precheck(path: str, roots: list[str] | None) -> None:
    """Cheap early refusal with a clear message; the descriptor checks are the real guard."""
    if roots is not None:
        real = os.path.realpath(path)
        if not _within(real, roots):
            raise _outside(path, real, roots)


def fd_path(fd: int) -> str:
    """The real path of an open descriptor, as the kernel sees it now."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        getpath = getattr(fcntl, "F_GETPATH", None)  # macOS
        if getpath is None:
            raise FsError(
                "denied", "cannot verify where an opened file lives (no /proc); refusing"
            ) from None
        real = os.fsdecode(fcntl.fcntl(fd, getpath, bytes(1024)).rstrip(b"\0"))
    if real.endswith(" (deleted)") or not real.startswith("/"):
        raise FsError("denied", "the file was removed while it was being opened")
    return real


def _check_fd(fd: int, shown: str, roots: list[str] | None) -> str:
    real = fd_path(fd) if roots is not None else _safe_fd_path(fd, shown)
    if roots is not None and not _within(real, roots):
        raise _outside(shown, real, roots)
    return real


def _safe_fd_path(fd: int, fallback: str) -> str:
    try:
        return fd_path(fd)
    except FsError:
        return fallback


def _split(path: str) -> tuple[str, str]:
    parent, name = os.path.split(path)
    if name in ("", ".", ".."):
        raise FsError("invalid", f"{path} does not name a file")
    return parent or "/", name


def _open_dir(path: str, roots: list[str] | None) -> tuple[int, str]:
    _precheck(path, roots)
    fd = os.open(path, _DIR_FLAGS)
    try:
        return fd, _check_fd(fd, path, roots)
    except BaseException:
        os.close(fd)
        raise


def _symlink_target(dfd: int, dir_real: str, name: str, hops: int) -> str:
    if hops >= MAX_SYMLINK_HOPS:
        raise FsError("denied", f"too many symbolic links at {os.path.join(dir_real, name)}")
    return os.path.realpath(os.path.join(dir_real, os.readlink(name, dir_fd=dfd)))


def _open_file(
    path: str, roots: list[str] | None, hops: int = 0
) -> tuple[int, os.stat_result, str]:
    """Open a regular file for reading; returns (fd, fstat, real path)."""
    _precheck(path, roots)
    if os.path.isdir(path):  # also when path is a root itself (its parent is outside)
        raise FsError("is_directory", f"{path} is a directory, not a file")
    parent, name = _split(path)
    dfd, dir_real = _open_dir(parent, roots)
    target = None
    try:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            target = _symlink_target(dfd, dir_real, name, hops)
    finally:
        os.close(dfd)
    if target is not None:
        if roots is not None and not _within(target, roots):
            raise _outside(path, target, roots)
        return _open_file(target, roots, hops + 1)
    st = os.fstat(fd)
    if stat_mod.S_ISDIR(st.st_mode):
        os.close(fd)
        raise FsError("is_directory", f"{path} is a directory, not a file")
    if not stat_mod.S_ISREG(st.st_mode):
        os.close(fd)
        raise FsError("denied", f"{path} is not a regular file (device, FIFO or socket); refused")
    return fd, st, os.path.join(dir_real, name)


def _read_fd(fd: int, limit: int | None) -> bytes:
    chunks = []
    total = 0
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if limit is not None and total > limit:
            raise FsError("too_large", f"the file is over the {limit} byte limit")
    return b"".join(chunks)


def version_token(st: os.stat_result, data: bytes) -> str:
    """``mtime_ns:size:sha256[:16]``; changes whenever the content or the inode time does."""
    return f"{st.st_mtime_ns}:{st.st_size}:{hashlib.sha256(data).hexdigest()[:16]}"


def _hash_fd(fd: int) -> str:
    """sha256 prefix of an open file, read from its start in bounded chunks."""
    h = hashlib.sha256()
    offset = 0
    while True:
        chunk = os.pread(fd, HASH_CHUNK_BYTES, offset)
        if not chunk:
            return h.hexdigest()[:16]
        h.update(chunk)
        offset += len(chunk)


def fd_version(fd: int, st: os.stat_result) -> str:
    """The exact version token of an open file, hashing it in chunks (bounded memory)."""
    return f"{st.st_mtime_ns}:{st.st_size}:{_hash_fd(fd)}"


def _current_version(fd: int, st: os.stat_result, expected: str) -> str:
    """What to compare ``expected`` with: the exact token, hashed only when the size and
    mtime agree (a token that differs there cannot match, whatever the content)."""
    if not expected.startswith(f"{st.st_mtime_ns}:{st.st_size}:"):
        return f"{st.st_mtime_ns}:{st.st_size}:?"
    return fd_version(fd, st)


def weak_version_token(st: os.stat_result) -> str:
    """``mtime_ns:size:i<inode>``: change detection without reading the file.

    Not accepted as ``expected_version`` (an in-place change within one timestamp tick
    that keeps the size would go unseen); writes here always replace the inode.
    """
    return f"{st.st_mtime_ns}:{st.st_size}:i{st.st_ino}"


def is_weak_version(version: str) -> bool:
    return version.rsplit(":", 1)[-1].startswith("i")


def _stat_dict(real: str, st: os.stat_result, version: str | None) -> dict[str, Any]:
    """``version``: the exact token, or ``None`` for the weak one (files) / none (dirs)."""
    kind = "directory" if stat_mod.S_ISDIR(st.st_mode) else "file"
    return {
        "path": show(real),
        "exists": True,
        "type": kind,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ino": st.st_ino,
        "version": (
            version if version is not None else weak_version_token(st) if kind == "file" else ""
        ),
    }


# ------------------------------------------------------------------------- text
def decode_text(data: bytes) -> tuple[str, str]:
    """Decode bytes to text for showing; returns (text, encoding).

    UTF-8, UTF-8 with BOM, UTF-16 with BOM; a byte that does not decode is shown as
    U+FFFD (the rest of the file stays UTF-8). Raises ``binary`` for binary data.
    """
    dec = decode_display(data)
    if dec is None:
        raise FsError("binary", "the file is binary (it contains NUL bytes)")
    return dec


# --------------------------------------------------------------------- reading
def op_read(path: str, roots: list[str] | None = None, max_bytes: int | None = None) -> dict:
    roots = _roots(roots)
    fd, st, real = _open_file(check_path(path), roots)
    try:
        if max_bytes is not None and st.st_size > max_bytes:
            raise FsError(
                "too_large", f"{path} is {st.st_size} bytes, over the {max_bytes} byte limit"
            )
        data = _read_fd(fd, max_bytes)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return {"data": data, "stat": _stat_dict(real, st, version_token(st, data))}


def op_stat(path: str, roots: list[str] | None = None, hash: bool = True) -> dict:
    roots = _roots(roots)
    check_path(path)
    try:
        dfd, real = _open_dir(path, roots)
    except (NotADirectoryError, FileNotFoundError):
        pass
    else:
        try:
            return _stat_dict(real, os.fstat(dfd), None)
        finally:
            os.close(dfd)
    try:
        fd, st, real = _open_file(path, roots)
    except (FileNotFoundError, NotADirectoryError):
        return {
            "path": show(path),
            "exists": False,
            "type": "",
            "size": 0,
            "mtime_ns": 0,
            "ino": 0,
            "version": ABSENT,
        }
    try:
        return _stat_dict(real, st, fd_version(fd, st) if hash else None)
    finally:
        os.close(fd)


def op_list(path: str, roots: list[str] | None = None) -> dict:
    roots = _roots(roots)
    dfd, _ = _open_dir(check_path(path), roots)
    try:
        entries: list[dict[str, Any]] = []
        with os.scandir(dfd) as it:
            for e in it:
                if e.name.startswith(TMP_PREFIX):
                    continue
                st = e.stat(follow_symlinks=False)
                kind = (
                    "symlink"
                    if e.is_symlink()
                    else "directory"
                    if e.is_dir(follow_symlinks=False)
                    else "file"
                    if e.is_file(follow_symlinks=False)
                    else "other"
                )
                entries.append(
                    {
                        "name": show(e.name),
                        "type": kind,
                        "size": st.st_size,
                        "mtime_ns": st.st_mtime_ns,
                        "ino": st.st_ino,
                    }
                )
    finally:
        os.close(dfd)
    entries.sort(key=lambda x: str(x["name"]))
    return {"entries": entries}


HELPER_FILES = ("_fsops.py", "_fsops_search.py", "_fsops_text.py", "_fsops_write.py")
"""The helper's files; a sandbox needs all in one directory and runs ``_fsops.py``."""


def helper_files() -> dict[str, bytes]:
    """File name -> bytes of the helper's files, to copy into a sandbox."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for name in HELPER_FILES:
        with open(os.path.join(here, name), "rb") as f:
            out[name] = f.read()
    return out


def helper_paths() -> dict[str, str]:
    """File name -> path on this machine of the helper's files (to bind-mount them)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return {name: os.path.join(here, name) for name in HELPER_FILES}


_parts: dict[str, ModuleType] = {}


def _part(name: str) -> ModuleType:
    """The helper's other file ``name`` (``_fsops_search``, ``_fsops_write``), loaded once
    (from mnemoscope's package, or from :data:`HELPER_PACKAGE` in a sandbox)."""
    mod = _parts.get(name)
    if mod is None:
        mod = _parts[name] = importlib.import_module(f".{name}", __package__)
    return mod


def _in_part(part: str, name: str) -> Callable[..., dict]:
    """The operation ``name`` of the helper's file ``part``, imported on its first call
    (a helper that only reads never loads the write code)."""

    def operation(**kwargs: Any) -> dict:
        fn: Callable[..., dict] = getattr(_part(part), name)
        return fn(**kwargs)

    operation.__name__ = name
    return operation


def op_ping() -> dict:
    return {"pid": os.getpid(), "python": sys.version.split()[0]}


OPS: dict[str, Callable[..., dict]] = {
    "read": op_read,
    "stat": op_stat,
    "list": op_list,
    "glob": _in_part("_fsops_search", "op_glob"),
    "grep": _in_part("_fsops_search", "op_grep"),
    "write": _in_part("_fsops_write", "op_write"),
    "write_text": _in_part("_fsops_write", "op_write_text"),
    "edit": _in_part("_fsops_write", "op_edit"),
    "remove": _in_part("_fsops_write", "op_remove"),
    "mkdir": _in_part("_fsops_write", "op_mkdir"),
    "ping": op_ping,
}

_ERRNO_CODES = {
    errno.ENOENT: "not_found",
    errno.ENOTDIR: "not_found",
    errno.EISDIR: "is_directory",
    errno.EACCES: "denied",
    errno.EPERM: "denied",
    errno.EROFS: "read_only",
    errno.ELOOP: "denied",
    errno.ENAMETOOLONG: "invalid",
    errno.EXDEV: "denied",
}


def dispatch(op: str, args: dict[str, Any]) -> dict:
    """Run one operation; every failure becomes :class:`FsError`."""
    fn = OPS.get(op)
    if fn is None:
        raise FsError("invalid", f"unknown operation {op!r}")
    try:
        return fn(**args)
    except FsError as exc:  # messages name paths: escape what cannot be serialised
        raise FsError(exc.code, show(exc.message)) from None
    except OSError as exc:
        code = _ERRNO_CODES.get(exc.errno or 0, "io")
        where = exc.filename if isinstance(exc.filename, str) else args.get("path", "")
        text = exc.strerror or str(exc)
        if code == "read_only":
            text += " (only the workspace directory is writable)"
        raise FsError(code, show(f"{where}: {text}")) from None
    except ValueError as exc:  # embedded NUL, bad arguments
        raise FsError("invalid", show(str(exc))) from None


# ------------------------------------------------------------- helper protocol
def to_json(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return {"$b64": base64.b64encode(obj).decode("ascii")}
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_json(v) for v in obj]
    return obj


def from_json(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"$b64"}:
            return base64.b64decode(obj["$b64"])
        return {k: from_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_json(v) for v in obj]
    return obj


def handle(line: str | bytes) -> str:
    """Answer one JSON request ``{"op": ..., "args": {...}}`` with one JSON line."""
    try:
        req = json.loads(line)
        result = dispatch(req["op"], from_json(req.get("args") or {}))
        out: dict[str, Any] = {"ok": True, "result": to_json(result)}
    except FsError as exc:
        out = {"ok": False, "code": exc.code, "message": exc.message}
    except Exception as exc:  # a helper must answer, whatever happens
        out = {"ok": False, "code": "io", "message": show(f"{type(exc).__name__}: {exc}")}
    return json.dumps(out)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "serve":
        out = sys.stdout
        for line in sys.stdin.buffer:
            if line.strip():
                out.write(handle(line) + "\n")
                out.flush()
        return 0
    if len(argv) == 3 and argv[1] == "once":
        arg = argv[2]
        if arg.startswith("@"):
            with open(arg[1:], "rb") as f:
                arg = f.read().decode("utf-8")
            os.unlink(argv[2][1:])
        sys.stdout.write(handle(arg) + "\n")
        return 0
    sys.stderr.write("usage: _fsops.py serve | once '<json>' | once @request.json\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
