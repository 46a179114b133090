"""Writing operations of the workspace helper (standard library only).

The third part of the helper of :mod:`mnemoscope.workspace._fsops` (which documents the
guarantees: confinement, atomic writes, version tokens, serialised writers), shipped
with it into every sandbox and loaded by it on the first write. Every write goes through
:func:`_update`: the directory lock, then the version check, then the new bytes, written
to a temp file that replaces the old one.

What is read of the old file is bounded: nothing for a byte write or a version that
already differs in size or mtime, :data:`TEXT_SNIFF_BYTES` for a text write (encoding
and line endings), at most :data:`MAX_EDIT_BYTES` for an edit (refused beyond, before
any read). Matching a version hashes in chunks (``_fsops.fd_version``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
import stat as stat_mod
from collections.abc import Callable
from typing import Any

from . import _fsops as core
from ._fsops import _DIR_FLAGS, _FILE_FLAGS, ABSENT, HASH_CHUNK_BYTES, TMP_PREFIX, FsError
from ._fsops_text import (
    decode_exact,
    encode_text,
    find_spans,
    line_at,
    replacement,
    sniff_encoding,
    to_crlf,
    uses_crlf,
)

MAX_EDIT_BYTES = 32 * 1024 * 1024
"""An edit refuses a larger file (before reading it): it must hold the file in memory."""
TEXT_SNIFF_BYTES = 64 * 1024
"""A text write reads this much of the old file, for its encoding and line endings."""


def _encode(text: str, encoding: str) -> bytes:
    try:
        return encode_text(text, encoding)
    except UnicodeEncodeError as exc:
        raise FsError(
            "invalid", f"the new text cannot be encoded in the file's encoding {encoding}: {exc}"
        ) from None
    except LookupError:
        raise FsError("invalid", f"unknown encoding {encoding!r}") from None


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
    fd, real = core._open_dir(probe, roots)
    try:
        for name in reversed(missing):
            try:
                os.mkdir(name, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            nfd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
            real = core._check_fd(fd, os.path.join(real, name), roots)
    finally:
        os.close(fd)


Updater = Callable[[int | None, os.stat_result | None], tuple[bytes, dict[str, Any]]]
"""``fn(old_fd, old_stat)`` (both ``None`` for a new file) -> (new bytes, extra result
fields). It reads from ``old_fd`` only what it needs (with ``os.pread``)."""


def _conflict(path: str, expected: str, current: str) -> FsError:
    what = (
        "does not exist any more"
        if current == ABSENT
        else ("was created by someone else" if expected == ABSENT else "was modified")
    )
    return FsError("conflict", f"{path} {what} since it was last read")


def _update(
    path: str,
    roots: list[str] | None,
    fn: Updater,
    expected_version: str | None,
    create_parents: bool,
    hops: int = 0,
) -> dict:
    """Replace ``path`` atomically with the bytes ``fn`` makes, under the directory lock.

    The version check comes first and reads nothing when size or mtime already differ
    (or the file should be absent); ``fn`` then reads what it needs of the old file.
    """
    if expected_version and expected_version != ABSENT and core.is_weak_version(expected_version):
        raise FsError(
            "invalid",
            f"expected_version {expected_version!r} is a weak token (from stat(hash=False) or "
            "list); pass the version of a read or of stat() instead",
        )
    core._precheck(path, roots)
    if os.path.isdir(path):
        raise FsError("is_directory", f"{path} is a directory, not a file")
    parent, name = core._split(path)
    if create_parents:
        _makedirs(parent, roots)
    dfd, dir_real = core._open_dir(parent, roots)
    redirect = None
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)
        fd: int | None
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            fd = None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            fd = None
            redirect = core._symlink_target(dfd, dir_real, name, hops)
        if redirect is None:
            st: os.stat_result | None = None
            try:
                if fd is not None:
                    st = os.fstat(fd)
                    if stat_mod.S_ISDIR(st.st_mode):
                        raise FsError("is_directory", f"{path} is a directory, not a file")
                    if not stat_mod.S_ISREG(st.st_mode):
                        raise FsError(
                            "denied", f"{path} is not a regular file (device, FIFO or socket)"
                        )
                if expected_version is not None:
                    current = (
                        ABSENT
                        if fd is None or st is None
                        else "present"
                        if expected_version == ABSENT
                        else core._current_version(fd, st, expected_version)
                    )
                    if current != expected_version:
                        raise _conflict(path, expected_version, current)
                new, extra = fn(fd, st)
            finally:
                if fd is not None:
                    os.close(fd)
            mode = None if st is None else stat_mod.S_IMODE(st.st_mode)
            st_new = _replace_with(dfd, name, new, mode)
            return {
                "stat": core._stat_dict(
                    os.path.join(dir_real, name), st_new, core.version_token(st_new, new)
                ),
                "created": st is None,
                **extra,
            }
    finally:
        os.close(dfd)  # also releases the flock
    if roots is not None and not core._within(redirect, roots):
        raise core._outside(path, redirect, roots)
    return _update(redirect, roots, fn, expected_version, create_parents, hops + 1)


def _replace_with(dfd: int, name: str, new: bytes, mode: int | None) -> os.stat_result:
    """Write ``new`` to a temp file in ``dfd``, fsync, rename over ``name``, fsync ``dfd``."""
    tmp = TMP_PREFIX + secrets.token_hex(8)
    tfd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dfd
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
    return st_new


def op_write(
    path: str,
    data: bytes,
    roots: list[str] | None = None,
    expected_version: str | None = None,
    create_parents: bool = True,
) -> dict:
    return _update(
        core.check_path(path),
        core._roots(roots),
        lambda fd, st: (data, {}),
        expected_version,
        create_parents,
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
    def fn(fd: int | None, st: os.stat_result | None) -> tuple[bytes, dict[str, Any]]:
        enc, body = encoding or "utf-8", text
        if fd is not None:
            old_enc, crlf = sniff_encoding(os.pread(fd, TEXT_SNIFF_BYTES, 0))
            enc = encoding or old_enc
            if preserve_line_endings and crlf:
                body = to_crlf(body)
        return _encode(body, enc), {"encoding": enc}

    return _update(core.check_path(path), core._roots(roots), fn, expected_version, create_parents)


def _read_for_edit(path: str, fd: int, st: os.stat_result) -> tuple[str, str]:
    if st.st_size > MAX_EDIT_BYTES:
        raise FsError(
            "too_large",
            f"{path} is {st.st_size} bytes; Edit changes files of up to {MAX_EDIT_BYTES} "
            f"bytes ({MAX_EDIT_BYTES >> 20} MiB). Change it with a command instead, or "
            "Write a smaller file.",
        )
    chunks, offset = [], 0
    while offset <= MAX_EDIT_BYTES:
        chunk = os.pread(fd, HASH_CHUNK_BYTES, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    if offset > MAX_EDIT_BYTES:
        raise FsError("too_large", f"{path} grew over the {MAX_EDIT_BYTES} byte edit limit")
    try:
        dec = decode_exact(b"".join(chunks))
    except UnicodeDecodeError:
        raise FsError(
            "binary", f"{path} starts with a UTF-16 byte-order mark but is not valid UTF-16"
        ) from None
    if dec is None:
        raise FsError("binary", f"{path} is binary (it contains NUL bytes); Edit changes text")
    return dec


def op_edit(
    path: str,
    old_string: str,
    new_string: str,
    roots: list[str] | None = None,
    replace_all: bool = False,
    expected_version: str | None = None,
) -> dict:
    def fn(fd: int | None, st: os.stat_result | None) -> tuple[bytes, dict[str, Any]]:
        if fd is None or st is None:
            if old_string == "":
                return _encode(new_string, "utf-8"), {"replacements": 1, "line": 1}
            raise FsError("not_found", f"{path} does not exist")
        text, enc = _read_for_edit(path, fd, st)
        if old_string == "":
            if text.strip():
                raise FsError(
                    "invalid",
                    f"old_string is empty but {path} is not; give the exact text to replace",
                )
            return _encode(new_string, enc), {"replacements": 1, "line": 1}
        o, n = old_string, new_string
        spans = find_spans(text, o)
        if not spans and uses_crlf(text):
            o, n = to_crlf(o), to_crlf(n)
            spans = find_spans(text, o)
        if not spans:
            raise FsError(
                "no_match",
                f"old_string was not found in {path}. Read the file again and copy the exact "
                "text, including whitespace and indentation.",
            )
        if len(spans) > 1 and not replace_all:
            raise FsError(
                "multiple_matches",
                f"old_string occurs {len(spans)} times in {path}; include more surrounding "
                "lines to make it unique, or set replace_all=true to replace every occurrence.",
            )
        parts, at = [], 0
        for start, end in spans:
            parts += [text[at:start], replacement(text[start:end], o, n)]
            at = end
        parts.append(text[at:])
        return _encode("".join(parts), enc), {
            "replacements": len(spans),
            "line": line_at(text, spans[0][0]),
        }

    if old_string == new_string:
        raise FsError("invalid", "old_string and new_string are identical; nothing to change")
    return _update(
        core.check_path(path), core._roots(roots), fn, expected_version, create_parents=False
    )


def op_remove(path: str, roots: list[str] | None = None, recursive: bool = False) -> dict:
    roots = core._roots(roots)
    parent, name = core._split(core.check_path(path))
    dfd, _ = core._open_dir(parent, roots)
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
    roots = core._roots(roots)
    core.check_path(path)
    if parents:
        _makedirs(path, roots)
    else:
        parent, name = core._split(path)
        dfd, _ = core._open_dir(parent, roots)
        try:
            os.mkdir(name, 0o777, dir_fd=dfd)
        except FileExistsError:
            pass
        finally:
            os.close(dfd)
    return {}
