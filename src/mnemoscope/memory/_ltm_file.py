"""The SQLite file of :class:`~mnemoscope.memory.LocalLongTermMemory`: one part of the store.

:class:`LtmFile` owns the one connection (opened on first use, see
:mod:`mnemoscope.memory._ltm_open`), the lock and worker-thread hop around every call, and
the in-process caches built from the file: the per-user vector matrices and lexical
indexes. The caches are dropped whenever another connection has committed (SQLite's
``data_version``), so several processes can share one file. The store's other parts
(writing, retrieval, management) reach the file only through :meth:`LtmFile.run`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from typing import TypeVar

from mnemoscope.embedding import EmbeddingModelBase
from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory import _ltm_index as vec
from mnemoscope.memory import _ltm_lexicon as lx
from mnemoscope.memory._ltm_open import connect, store_error

_T = TypeVar("_T")


class LtmFile:
    """The store's SQLite file and what is cached from it.

    Args:
        path: the SQLite file, or ``":memory:"``.
        embedding_model: the store's embedder (``None``: lexical-only); the vectors in the
            file must come from the same model.
        read_only: open with SQLite's ``mode=ro``.
        create: create the file and tables when missing.
        busy_timeout: seconds a write waits for another process's write.
    """

    def __init__(
        self,
        path: str,
        *,
        embedding_model: EmbeddingModelBase | None,
        read_only: bool,
        create: bool,
        busy_timeout: float,
    ) -> None:
        self.path = path
        self.embedding_model = embedding_model
        self.read_only = read_only
        self.create = create
        self.busy_timeout = busy_timeout
        self.matrices: dict[str, vec.UserMatrix] = {}
        """Per user: the unit vectors of their memories (built on first dense search)."""
        self.lexicons: dict[str, lx.Lexicon] = {}
        """Per user: the in-process BM25F index (refreshed from the file on each search)."""
        self.vector_mismatch: str | None = None
        """Why the file's vectors do not fit ``embedding_model``, or ``None``."""
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._data_version: int | None = None

    def writable(self, operation: str) -> None:
        """Raise :class:`~mnemoscope.errors.UserError` when the file is read-only."""
        if self.read_only:
            raise UserError(
                f"LocalLongTermMemory({self.path!r}) was opened with read_only=True; "
                f"open it without read_only to {operation}"
            )

    async def run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """``fn(connection)`` in a worker thread, one call at a time."""
        return await asyncio.to_thread(self._locked, fn)

    def matrix(self, conn: sqlite3.Connection, user_id: str) -> vec.UserMatrix | None:
        """The user's vector matrix (inside :meth:`run`); ``None`` without an embedder."""
        if self.embedding_model is None:
            return None
        matrix = self.matrices.get(user_id)
        if matrix is None:
            matrix = vec.load_user_matrix(conn, user_id, self.embedding_model.dimensions)
            self.matrices[user_id] = matrix
        return matrix

    async def require_vectors(self) -> None:
        """Raise :class:`~mnemoscope.errors.UserError` when the file's vectors come from
        another model than ``embedding_model`` (checked when the file is opened)."""
        if self._conn is None:
            await self.run(lambda conn: None)
        if self.vector_mismatch is not None:
            raise UserError(self.vector_mismatch)

    async def close(self) -> None:
        """Close the connection and drop the caches. Safe to call twice."""
        self.lexicons.clear()

        def close() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                self._closed = True
                self.matrices.clear()

        await asyncio.to_thread(close)

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise MemoryStoreError(f"LocalLongTermMemory({self.path!r}) is closed")
        if self._conn is not None:
            return self._conn
        conn = connect(
            self.path, read_only=self.read_only, create=self.create, busy_timeout=self.busy_timeout
        )
        try:
            self.vector_mismatch = self._check_vectors(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise store_error(self.path, exc) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _check_vectors(self, conn: sqlite3.Connection) -> str | None:
        if self.embedding_model is None:
            return None
        meta = dict(conn.execute("SELECT key, value FROM ltm_meta").fetchall())
        stored_model, stored_dims = meta.get("embedding_model"), meta.get("dimensions")
        model = self.embedding_model
        if stored_dims is None:
            return None
        if int(stored_dims) != model.dimensions or stored_model != model.model:
            return (
                f"{self.path!r} holds {stored_dims}-dimensional vectors from "
                f"{stored_model!r}, but embedding_model is {model!r}; pass the same model, "
                "or call `await store.reembed()` once to re-embed every memory with this one "
                f"(from the shell: mnemoscope ltm reembed {self.path} --embedding local)"
            )
        return None

    def _locked(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._lock:
            try:
                conn = self._connect()
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != self._data_version:  # another connection committed
                    self.matrices.clear()
                    self._data_version = version
                return fn(conn)
            except sqlite3.Error as exc:
                raise store_error(self.path, exc, action="read") from exc
