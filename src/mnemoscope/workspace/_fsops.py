"""Confined, crash-safe file operations (standard library only).

This file and ``_fsops_search.py`` (``glob``, ``grep``) are the one implementation of
every file operation of the workspace backends. :class:`~mnemoscope.workspace.LocalBackend`
calls :func:`dispatch` in a thread; the sandboxed backends (Bubblewrap, Docker, E2B) put
both files (:func:`helper_files`) in one directory of the sandbox and run this one there
as a helper (``python3 _fsops.py serve`` speaks JSON lines on stdin/stdout,
``python3 _fsops.py once '<json>'`` answers one request). They import nothing from
mnemoscope so that they run under ``python -I -S`` anywhere.

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
  processes write to it); nothing else is done twice
  (one open and read of the old file, which is hashed only for a version check).
* **Version tokens.** ``mtime_ns:size:sha256[:16]`` (exact; what ``expected_version``
  takes) or, from ``stat(hash=False)`` and ``list``, the weak ``mtime_ns:size:i<inode>``
  that detects changes without reading the file (every write here replaces the inode).
* **Serialised writers.** Writes and edits hold ``flock`` on the parent directory, which
  works across processes, threads and sandboxes sharing the directory, so concurrent
  edits lose nothing and version checks (compare-and-swap) are exact.
* **Text fidelity.** Encoding (UTF-8, UTF-8 with BOM, UTF-16, Latin-1) and line endings
  (CRLF stays CRLF) of an existing file are kept by text writes and edits.
"""

from __future__ import annotations

import base64
import codecs
import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat as stat_mod
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
MAX_SYMLINK_HOPS = 8
TMP_PREFIX = ".mnemoscope-tmp-"
ABSENT = "absent"
"""Version token of a file that does not exist (``expected_version`` for a creation)."""

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


def weak_version_token(st: os.stat_result) -> str:
    """``mtime_ns:size:i<inode>``: change detection without reading the file.

    Not accepted as ``expected_version`` (an in-place change within one timestamp tick
    that keeps the size would go unseen); writes here always replace the inode.
    """
    return f"{st.st_mtime_ns}:{st.st_size}:i{st.st_ino}"


def is_weak_version(version: str) -> bool:
    return version.rsplit(":", 1)[-1].startswith("i")


def _stat_dict(real: str, st: os.stat_result, data: bytes | None) -> dict[str, Any]:
    kind = "directory" if stat_mod.S_ISDIR(st.st_mode) else "file"
    return {
        "path": real,
        "exists": True,
        "type": kind,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ino": st.st_ino,
        "version": (
            version_token(st, data)
            if data is not None
            else weak_version_token(st)
            if kind == "file"
            else ""
        ),
    }


# ------------------------------------------------------------------------- text
def decode_text(data: bytes) -> tuple[str, str]:
    """Decode bytes to text; returns (text, encoding). Raises ``binary`` for binary data."""
    if data.startswith(codecs.BOM_UTF8):
        return data.decode("utf-8-sig"), "utf-8-sig"
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16"), "utf-16"
    if b"\x00" in data[:8192]:
        raise FsError("binary", "the file is binary (it contains NUL bytes)")
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return data.decode("latin-1"), "latin-1"


def uses_crlf(text: str) -> bool:
    crlf = text.count("\r\n")
    return crlf > 0 and crlf >= text.count("\n") - crlf


def _to_crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def _encode(text: str, encoding: str) -> bytes:
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as exc:
        raise FsError(
            "invalid", f"the new text cannot be encoded in the file's encoding {encoding}: {exc}"
        ) from None


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
    return {"data": data, "stat": _stat_dict(real, st, data)}


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
            "path": path,
            "exists": False,
            "type": "",
            "size": 0,
            "mtime_ns": 0,
            "ino": 0,
            "version": ABSENT,
        }
    try:
        data = _read_fd(fd, None) if hash else None
        return _stat_dict(real, st, data)
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
                        "name": e.name,
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


# --------------------------------------------------------------------- writing
def _makedirs(path: str, roots: list[str] | None) -> None:
    missing = []
    probe = path
    while not os.path.lexists(probe):
        probe, name = os.path.split(probe)
        if name in (".", ".."):
            raise FsError("invalid", f"{path} contains '.' or '..' in a missing directory")
        missing.append(name)
    if not missing:
        return
    fd, real = _open_dir(probe, roots)
    try:
        for name in reversed(missing):
            try:
                os.mkdir(name, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            nfd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
            real = _check_fd(fd, os.path.join(real, name), roots)
    finally:
        os.close(fd)


Updater = Callable[[bytes | None], tuple[bytes, dict[str, Any]]]


def _update(
    path: str,
    roots: list[str] | None,
    fn: Updater,
    expected_version: str | None,
    create_parents: bool,
    hops: int = 0,
) -> dict:
    """Replace ``path`` atomically with ``fn(old_bytes_or_None)`` under the directory lock."""
    if expected_version and expected_version != ABSENT and is_weak_version(expected_version):
        raise FsError(
            "invalid",
            f"expected_version {expected_version!r} is a weak token (from stat(hash=False) or "
            "list); pass the version of a read or of stat() instead",
        )
    _precheck(path, roots)
    if os.path.isdir(path):
        raise FsError("is_directory", f"{path} is a directory, not a file")
    parent, name = _split(path)
    if create_parents:
        _makedirs(parent, roots)
    dfd, dir_real = _open_dir(parent, roots)
    redirect = None
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)
        old: bytes | None = None
        mode = None
        current = ABSENT
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            fd = None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            fd = None
            redirect = _symlink_target(dfd, dir_real, name, hops)
        if redirect is None:
            if fd is not None:
                try:
                    st = os.fstat(fd)
                    if stat_mod.S_ISDIR(st.st_mode):
                        raise FsError("is_directory", f"{path} is a directory, not a file")
                    if not stat_mod.S_ISREG(st.st_mode):
                        raise FsError(
                            "denied", f"{path} is not a regular file (device, FIFO or socket)"
                        )
                    old = _read_fd(fd, None)
                    mode = stat_mod.S_IMODE(st.st_mode)
                    # hashed only for an exact version check
                    current = (
                        version_token(st, old)
                        if expected_version not in (None, ABSENT)
                        else "present"
                    )
                finally:
                    os.close(fd)
            if expected_version is not None and expected_version != current:
                what = (
                    "does not exist any more"
                    if current == ABSENT
                    else (
                        "was created by someone else"
                        if expected_version == ABSENT
                        else "was modified"
                    )
                )
                raise FsError("conflict", f"{path} {what} since it was last read")
            new, extra = fn(old)
            tmp = TMP_PREFIX + secrets.token_hex(8)
            tfd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o666,
                dir_fd=dfd,
            )
            try:
                try:
                    view = memoryview(new)
                    while view:
                        view = view[os.write(tfd, view) :]
                    if mode is not None:
                        os.fchmod(tfd, mode)
                    os.fsync(tfd)
                    st_new = os.fstat(tfd)
                finally:
                    os.close(tfd)
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except OSError:
                    pass
                raise
            os.fsync(dfd)
            return {
                "stat": _stat_dict(os.path.join(dir_real, name), st_new, new),
                "created": old is None,
                **extra,
            }
    finally:
        os.close(dfd)  # also releases the flock
    if roots is not None and not _within(redirect, roots):
        raise _outside(path, redirect, roots)
    return _update(redirect, roots, fn, expected_version, create_parents, hops + 1)


def op_write(
    path: str,
    data: bytes,
    roots: list[str] | None = None,
    expected_version: str | None = None,
    create_parents: bool = True,
) -> dict:
    return _update(
        check_path(path), _roots(roots), lambda old: (data, {}), expected_version, create_parents
    )


def op_write_text(
    path: str,
    text: str,
    roots: list[str] | None = None,
    expected_version: str | None = None,
    encoding: str | None = None,
    preserve_line_endings: bool = True,
    create_parents: bool = True,
) -> dict:
    def fn(old: bytes | None) -> tuple[bytes, dict[str, Any]]:
        enc, body = encoding or "utf-8", text
        if old is not None:
            try:
                old_text, old_enc = decode_text(old)
            except FsError:
                old_text, old_enc = "", "utf-8"
            enc = encoding or old_enc
            if preserve_line_endings and uses_crlf(old_text):
                body = _to_crlf(body)
        return _encode(body, enc), {"encoding": enc}

    return _update(check_path(path), _roots(roots), fn, expected_version, create_parents)


def op_edit(
    path: str,
    old_string: str,
    new_string: str,
    roots: list[str] | None = None,
    replace_all: bool = False,
    expected_version: str | None = None,
) -> dict:
    def fn(old: bytes | None) -> tuple[bytes, dict[str, Any]]:
        if old is None:
            if old_string == "":
                return new_string.encode("utf-8"), {"replacements": 1, "line": 1}
            raise FsError("not_found", f"{path} does not exist")
        text, enc = decode_text(old)
        if old_string == "":
            if text.strip():
                raise FsError(
                    "invalid",
                    f"old_string is empty but {path} is not; give the exact text to replace",
                )
            return _encode(new_string, enc), {"replacements": 1, "line": 1}
        o, n = old_string, new_string
        if o not in text and uses_crlf(text):
            o, n = _to_crlf(o), _to_crlf(n)
        count = text.count(o)
        if count == 0:
            raise FsError(
                "no_match",
                f"old_string was not found in {path}. Read the file again and copy the exact "
                "text, including whitespace and indentation.",
            )
        if count > 1 and not replace_all:
            raise FsError(
                "multiple_matches",
                f"old_string occurs {count} times in {path}; include more surrounding lines "
                "to make it unique, or set replace_all=true to replace every occurrence.",
            )
        line = text[: text.index(o)].count("\n") + 1
        new = text.replace(o, n) if replace_all else text.replace(o, n, 1)
        return _encode(new, enc), {"replacements": count if replace_all else 1, "line": line}

    if old_string == new_string:
        raise FsError("invalid", "old_string and new_string are identical; nothing to change")
    return _update(check_path(path), _roots(roots), fn, expected_version, create_parents=False)


def op_remove(path: str, roots: list[str] | None = None, recursive: bool = False) -> dict:
    roots = _roots(roots)
    parent, name = _split(check_path(path))
    dfd, _ = _open_dir(parent, roots)
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if stat_mod.S_ISDIR(st.st_mode):
            if recursive:
                shutil.rmtree(name, dir_fd=dfd)
            else:
                try:
                    os.rmdir(name, dir_fd=dfd)
                except OSError as exc:
                    if exc.errno != errno.ENOTEMPTY:
                        raise
                    raise FsError("invalid", f"{path} is a non-empty directory") from None
        else:
            os.unlink(name, dir_fd=dfd)
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return {}


def op_mkdir(path: str, roots: list[str] | None = None, parents: bool = True) -> dict:
    roots = _roots(roots)
    check_path(path)
    if parents:
        _makedirs(path, roots)
    else:
        parent, name = _split(path)
        dfd, _ = _open_dir(parent, roots)
        try:
            os.mkdir(name, 0o777, dir_fd=dfd)
        except FileExistsError:
            pass
        finally:
            os.close(dfd)
    return {}


HELPER_FILES = ("_fsops.py", "_fsops_search.py")
"""The helper's files; a sandbox needs both in one directory and runs ``_fsops.py``."""


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


_search_module: ModuleType | None = None


def _search() -> ModuleType:
    global _search_module
    if _search_module is None:
        try:
            from . import _fsops_search as mod
        except ImportError:  # running as the sandbox helper (see main)
            import _fsops_search as mod  # type: ignore[no-redef]
        _search_module = mod
    return _search_module


def op_glob(**kwargs: Any) -> dict:
    return _search().op_glob(**kwargs)


def op_grep(**kwargs: Any) -> dict:
    return _search().op_grep(**kwargs)


def op_ping() -> dict:
    return {"pid": os.getpid(), "python": sys.version.split()[0]}


OPS: dict[str, Callable[..., dict]] = {
    "read": op_read,
    "stat": op_stat,
    "list": op_list,
    "glob": op_glob,
    "grep": op_grep,
    "write": op_write,
    "write_text": op_write_text,
    "edit": op_edit,
    "remove": op_remove,
    "mkdir": op_mkdir,
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
    except FsError:
        raise
    except OSError as exc:
        code = _ERRNO_CODES.get(exc.errno or 0, "io")
        where = exc.filename if isinstance(exc.filename, str) else args.get("path", "")
        text = exc.strerror or str(exc)
        if code == "read_only":
            text += " (only the workspace directory is writable)"
        raise FsError(code, f"{where}: {text}") from None
    except ValueError as exc:  # embedded NUL, bad arguments
        raise FsError("invalid", str(exc)) from None


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
        out = {"ok": False, "code": "io", "message": f"{type(exc).__name__}: {exc}"}
    return json.dumps(out)


def main(argv: list[str]) -> int:
    # _fsops_search imports this module as "_fsops" from the same directory (under
    # "python -I" the script's directory is not on sys.path)
    sys.modules.setdefault("_fsops", sys.modules[__name__])
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
