"""Paths of a memory directory: confinement checks and inline reads on the local disk.

Used by :class:`~mnemoscope.memory.markdown._store.MemoryStore`. The per-reply checks
(where the memory directory really is, whether ``MEMORY.md`` exists) are a few system
calls each, so on the local disk they run inline on the event loop: a hop to a worker
thread would cost more than they do.
"""

from __future__ import annotations

import os
import stat as stat_mod
from typing import TYPE_CHECKING

from mnemoscope.errors import MemoryStoreError

if TYPE_CHECKING:
    from mnemoscope.workspace import FileContent


def strictly_within(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def check_confined(memdir: str, real: str, work_real: str) -> None:
    if not strictly_within(real, work_real):
        raise MemoryStoreError(
            f"the memory directory {memdir} resolves to {real}, which is not inside the "
            f"workdir {work_real}: a symbolic link there would let the agent read and write "
            f"outside its workdir. Make {memdir} a real directory inside the workdir "
            "(remove the link) or choose another workdir."
        )


def not_a_directory(memdir: str, real: str) -> str:
    where = "" if real == memdir else f" (it resolves to {real})"
    return f"the memory directory {memdir} is not a directory{where}; remove it or rename it"


def confine_local(workdir: str, memdir: str) -> tuple[str, str]:
    work_real = kernel_realpath(workdir)[0] or os.path.realpath(workdir)
    real, is_dir = kernel_realpath(memdir)
    if real is None:  # missing, a dangling link, or no /proc
        real = os.path.realpath(memdir)
        is_dir = not os.path.lexists(memdir) or os.path.isdir(real)
    check_confined(memdir, real, work_real)
    if not is_dir:
        raise MemoryStoreError(not_a_directory(memdir, real))
    return work_real, real


def read_inline(path: str, root: str, max_bytes: int) -> FileContent:
    """What ``LocalBackend().read_file(path, roots=[root], max_bytes=...)`` returns, in this
    thread (the same ``_fsops`` operation, its errors mapped the same way)."""
    from mnemoscope.workspace import FileContent, FileStat, FsError, dispatch_fsop, make_error

    try:
        res = dispatch_fsop("read", {"path": path, "roots": [root], "max_bytes": max_bytes})
    except FsError as exc:
        raise make_error(exc.code, exc.message) from None
    return FileContent(res["data"], FileStat.from_dict(res["stat"]))


def lexists(path: str) -> bool:
    # one lstat, inline: it runs at every reply and a thread hop would cost more
    return os.path.lexists(path)


def kernel_realpath(path: str) -> tuple[str | None, bool]:
    """``path`` resolved by the kernel (open with ``O_PATH``, read ``/proc/self/fd``) and
    whether it is a directory; ``(None, False)`` when it cannot be opened or there is no
    ``/proc``. Four system calls, where ``os.path.realpath`` makes one per component (and
    the same resolution the walk's descriptor check uses)."""
    flags = getattr(os, "O_PATH", 0)
    if not flags:
        return None, False
    try:
        fd = os.open(path, flags | os.O_CLOEXEC)
    except OSError:
        return None, False
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
        is_dir = stat_mod.S_ISDIR(os.fstat(fd).st_mode)
    except OSError:
        return None, False
    finally:
        os.close(fd)
    if not real.startswith("/") or real.endswith(" (deleted)"):
        return None, False
    return real, is_dir
