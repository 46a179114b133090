"""The local Qdrant clients of :class:`~mnemoscope.memory.Mem0LongTermMemory`.

Local Qdrant locks its directory to one client per process, and persists to SQLite
without locking of its own. :data:`QDRANT_CLIENTS` hands every store built on one directory
the same client (reference-counted, closed with the last store), and that client runs one
call at a time (:class:`SerializedQdrantClient`).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any

from mnemoscope.errors import UserError

logger = logging.getLogger("mnemoscope.memory.mem0")


class SerializedQdrantClient:
    """A local ``QdrantClient`` that runs one call at a time.

    Local mode persists to SQLite without any locking, and mem0 calls the client from
    worker threads: concurrent adds (``add_memory`` with several sentences, two middlewares
    on one path) failed with "cannot start a transaction within a transaction" and lost
    writes. Every call goes through one lock per directory.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return locked

    def __deepcopy__(self, memo: dict[int, Any]) -> SerializedQdrantClient:
        return self  # mem0 deep-copies configs; a client is shared, never copied

    def __copy__(self) -> SerializedQdrantClient:
        return self

    def __repr__(self) -> str:
        return f"SerializedQdrantClient({self._client!r})"


class _QdrantRegistry:
    """One ``QdrantClient`` per local directory per process, reference-counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[str, tuple[SerializedQdrantClient, int]] = {}

    def acquire(self, path: str) -> tuple[str, SerializedQdrantClient]:
        key = os.path.realpath(os.path.expanduser(path))
        with self._lock:
            if key in self._clients:
                client, refs = self._clients[key]
                self._clients[key] = (client, refs + 1)
                return key, client
            from qdrant_client import QdrantClient

            try:
                raw = QdrantClient(path=key)
            except RuntimeError as exc:  # locked by another process (or a foreign client)
                raise UserError(
                    f"the local Qdrant directory {key!r} is in use by another Qdrant client "
                    f"({exc}). Local mode allows one client per directory: share one "
                    "Mem0Middleware/store, pass the same mem0 client as client=, use another "
                    "path, or run a Qdrant server (mem0_config.vector_store.config host/url)."
                ) from exc
            client = SerializedQdrantClient(raw)
            self._clients[key] = (client, 1)
            return key, client

    def release(self, key: str) -> None:
        with self._lock:
            if key not in self._clients:
                return
            client, refs = self._clients[key]
            if refs > 1:
                self._clients[key] = (client, refs - 1)
                return
            del self._clients[key]
        try:
            client.close()
        except Exception as exc:  # closing is best effort
            logger.debug("closing the Qdrant client of %s failed: %s", key, exc)

    def refs(self, path: str) -> int:
        key = os.path.realpath(os.path.expanduser(path))
        with self._lock:
            return self._clients.get(key, (None, 0))[1]


QDRANT_CLIENTS = _QdrantRegistry()
