"""Opening the SQLite file of :class:`~mnemoscope.memory.LocalLongTermMemory`.

Three ways to open a store:

* ``create=True`` (default): a missing file or a database without the store's tables gets
  them (the library default; ``record`` then works on a new path).
* ``create=False``: the file must already hold a store; nothing is created, neither the
  file nor any table ("no long-term store in FILE" otherwise). Writes are allowed.
* ``read_only=True``: as ``create=False``, and the connection is SQLite's ``mode=ro``, so
  the file is never written (byte for byte). A WAL-mode file with no ``-wal`` next to it
  (no connection has it open) is read as ``immutable=1`` so that SQLite does not leave
  ``-wal``/``-shm`` files behind either.

SQLite failures become :class:`~mnemoscope.errors.MemoryStoreError` with the path and what
to do (a file that is not a database, a damaged one, a locked one); a damaged file is
never modified: the schema is only created in a database that lacks every store table.
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote

from mnemoscope.errors import MemoryStoreError
from mnemoscope.memory._ltm_schema import DDL, SCHEMA_VERSION, transaction

TABLES = ("ltm_meta", "ltm_memories", "ltm_vectors", "ltm_fts", "ltm_history")
"""The tables every store file holds."""

_WAL_HEADER_OFFSET = 18  # bytes 18-19 of a SQLite header are 2, 2 in WAL mode


def _is_wal_without_log(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError:
        return False
    wal = header[:16] == b"SQLite format 3\x00" and header[18:20] == b"\x02\x02"
    return wal and not os.path.exists(path + "-wal")


def store_error(path: str, exc: sqlite3.Error, *, action: str = "open") -> MemoryStoreError:
    """A :class:`MemoryStoreError` for a SQLite failure on ``path``, naming the fix."""
    text = str(exc)
    low = text.casefold()
    if "file is not a database" in low:
        return MemoryStoreError(
            f"{path!r} is not a SQLite database, so it is no long-term store (SQLite: {text}); "
            "pass the path of a store that LocalLongTermMemory created, or a new path to "
            "create one. The file was left unchanged."
        )
    if "malformed" in low or "corrupt" in low:
        return MemoryStoreError(
            f"the long-term store {path!r} is damaged (SQLite: {text}); the file was left "
            f"unchanged. Restore it from a backup, salvage what is readable with "
            f"`sqlite3 {path} .recover > recovered.sql`, or pass a new path to start over."
        )
    if "database is locked" in low or "database is busy" in low:
        return MemoryStoreError(
            f"{path!r} is locked by another process's write (SQLite: {text}); retry, or "
            "pass a larger busy_timeout="
        )
    if "readonly database" in low or "read-only" in low:
        return MemoryStoreError(
            f"cannot write {path!r} (SQLite: {text}); check the file's and its directory's "
            "permissions, or open the store with read_only=True to inspect it"
        )
    if "unable to open" in low:
        return MemoryStoreError(
            f"cannot {action} {path!r} (SQLite: {text}); check that the directory exists "
            "and is readable (and writable unless read_only=True)"
        )
    return MemoryStoreError(f"LocalLongTermMemory({path!r}): {type(exc).__name__}: {text}")


def no_store_error(path: str, missing: list[str], found: int) -> MemoryStoreError:
    if found == 0:
        return MemoryStoreError(
            f"no long-term store in {path!r}: it has none of the store's tables "
            f"({', '.join(TABLES)}); pass the path of a store that LocalLongTermMemory created"
        )
    return MemoryStoreError(
        f"{path!r} holds an incomplete long-term store (missing tables: {', '.join(missing)}); "
        "restore it from a backup or open it with create=True to add them"
    )


def connect(path: str, *, read_only: bool, create: bool, busy_timeout: float) -> sqlite3.Connection:
    """Open ``path`` as a store; see the module docstring. Raises ``MemoryStoreError``."""
    memory = path == ":memory:"
    if not memory and not create and not os.path.isfile(path):
        what = "a directory" if os.path.isdir(path) else "not found"
        raise MemoryStoreError(
            f"no long-term store at {path!r} ({what}); pass the path of an existing store"
        )
    if not memory and not create and not read_only:
        # look read-only first: a writable connection to a file that turns out to hold no
        # store would still checkpoint (and so rewrite) another program's WAL on close
        connect(path, read_only=True, create=False, busy_timeout=busy_timeout).close()
    if memory:
        target, uri = path, False
    elif read_only:
        flags = "mode=ro&immutable=1" if _is_wal_without_log(path) else "mode=ro"
        target, uri = f"file:{quote(os.path.abspath(path))}?{flags}", True
    elif not create:
        target, uri = f"file:{quote(os.path.abspath(path))}?mode=rw", True
    else:
        target, uri = path, False
    try:
        conn = sqlite3.connect(
            target, timeout=busy_timeout, isolation_level=None, check_same_thread=False, uri=uri
        )
    except sqlite3.Error as exc:
        raise store_error(path, exc) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        names = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'ltm_%'"
            ).fetchall()
        }
        missing = [t for t in TABLES if t not in names]
        if missing and (read_only or not create or len(missing) < len(TABLES)):
            # an incomplete store is damage, not a new file: never add tables to it
            raise no_store_error(path, missing, len(TABLES) - len(missing))
        if not read_only:
            if not memory:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        if missing:
            with transaction(conn):
                for statement in DDL.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT OR IGNORE INTO ltm_meta (key, value) VALUES ('schema_version', ?)",
                    (SCHEMA_VERSION,),
                )
    except MemoryStoreError:
        conn.close()
        raise
    except sqlite3.Error as exc:
        conn.close()
        raise store_error(path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn
