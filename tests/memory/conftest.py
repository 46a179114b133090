"""Fixtures for the short-term memory contract suite.

``make_memory`` builds memories of one backend (the test is parametrised over all of
them) on unique user ids, and clears and closes them afterwards. ``backend_url`` is the
URL the backend lives at (``None`` in memory), for tests that start other processes.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.memory import InMemoryMemory, MemoryBase, SessionStoreMemory, StoredMsg

ALL_BACKENDS = ["inmemory", "protocol", "redis", "sqlite", "postgres", "mariadb"]
SHARED_BACKENDS = ["redis", "sqlite", "postgres", "mariadb"]  # reachable by other processes
SQL_BACKENDS = ["sqlite", "postgres", "mariadb"]

MakeMemory = Callable[..., MemoryBase]


def backend_url_for(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> str | None:
    if backend == "inmemory":
        return None
    if backend == "protocol":  # a directory of JSON-lines files
        return str(tmp_path)
    if backend == "redis":
        return request.getfixturevalue("redis_url")
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'memory.db'}"
    if backend == "postgres":
        return request.getfixturevalue("postgres_url")
    if backend == "mariadb":
        return request.getfixturevalue("mariadb_url")
    raise AssertionError(backend)


class JsonLinesSessionStore:
    """A third-party-style :class:`~mnemoscope.memory.SessionStore`: one JSON-lines file
    per session, appended to, rewritten through a temporary file and ``os.replace``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, user_id: str, session_id: str) -> Path:
        return self.root / f"{user_id.encode().hex()}-{session_id.encode().hex()}.jsonl"

    async def load(self, user_id: str, session_id: str) -> list[dict[str, Any]]:
        path = self.path_of(user_id, session_id)

        def read() -> list[dict[str, Any]]:
            if not path.exists():
                return []
            return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]

        return await asyncio.to_thread(read)

    async def append(self, user_id: str, session_id: str, entries: Sequence[StoredMsg]) -> None:
        text = "".join(e.model_dump_json() + "\n" for e in entries)
        path = self.path_of(user_id, session_id)

        def write() -> None:
            with path.open("a", encoding="utf-8") as f:
                f.write(text)

        await asyncio.to_thread(write)

    async def rewrite(self, user_id: str, session_id: str, entries: Sequence[StoredMsg]) -> None:
        text = "".join(e.model_dump_json() + "\n" for e in entries)
        path = self.path_of(user_id, session_id)

        def write() -> None:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, "utf-8")
            os.replace(tmp, path)

        await asyncio.to_thread(write)


_JSONL_STORES: dict[str, JsonLinesSessionStore] = {}


def build(backend: str, url: str | None, engines: dict[str, Any], **kw: Any) -> MemoryBase:
    if backend == "inmemory":
        return InMemoryMemory(**kw)
    if backend == "protocol":
        assert url is not None
        # one store object per directory, as an application would hold it
        store = _JSONL_STORES.setdefault(url, JsonLinesSessionStore(Path(url)))
        return SessionStoreMemory(store, **kw)
    if backend == "redis":
        from mnemoscope.memory import RedisMemory

        return RedisMemory.from_url(url, **kw)  # type: ignore[arg-type]
    from mnemoscope.memory import AsyncSQLAlchemyMemory

    if backend not in engines:
        engines[backend] = AsyncSQLAlchemyMemory.create_engine(url)  # type: ignore[arg-type]
    return AsyncSQLAlchemyMemory(engines[backend], **kw)


@pytest.fixture(params=ALL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def backend_url(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> str | None:
    return backend_url_for(request, backend, tmp_path)


@pytest.fixture
async def make_memory(
    backend: str, backend_url: str | None, unique_id: str
) -> AsyncIterator[MakeMemory]:
    """``make_memory(session_id="s", user_id=None, **kw)``; user ids default to a unique one."""
    made: list[MemoryBase] = []
    engines: dict[str, Any] = {}

    def make(session_id: str = "s", user_id: str | None = None, **kw: Any) -> MemoryBase:
        mem = build(
            backend,
            backend_url,
            engines,
            user_id=user_id or f"u-{unique_id}",
            session_id=session_id,
            **kw,
        )
        made.append(mem)
        return mem

    yield make
    for mem in made:
        await mem.clear()
        await mem.aclose()
    for engine in engines.values():
        await engine.dispose()
