"""Fixtures of the service tests: an in-process app and real uvicorn workers."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

_spec = importlib.util.spec_from_file_location("svc_factory", HERE / "svc_factory.py")
assert _spec is not None and _spec.loader is not None
svc_factory = importlib.util.module_from_spec(_spec)
sys.modules["svc_factory"] = svc_factory
_spec.loader.exec_module(svc_factory)

TOKENS = {"alice-token-0001": "alice", "bob-token-00002": "bob"}
ALICE = {"Authorization": "Bearer alice-token-0001"}
BOB = {"Authorization": "Bearer bob-token-00002"}


def parse_sse(text: str) -> list[dict[str, Any]]:
    """The events of an SSE body: ``{"id": int, "event": str, "data": dict}``."""
    out = []
    for frame in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in frame.splitlines():
            if line.startswith(":") or ":" not in line:
                continue
            k, v = line.split(":", 1)
            fields[k] = v[1:] if v.startswith(" ") else v
        if "data" in fields:
            out.append(
                {
                    "id": int(fields["id"]),
                    "event": fields["event"],
                    "data": json.loads(fields["data"]),
                }
            )
    return out


@pytest.fixture
def memories() -> Iterator[dict[Any, Any]]:
    svc_factory.MEMORIES.clear()
    yield svc_factory.MEMORIES
    svc_factory.MEMORIES.clear()


@pytest.fixture
async def make_client(memories: dict[Any, Any]) -> AsyncIterator[Any]:
    """``await make_client(**create_app_kwargs)`` -> an httpx client on an in-process app."""
    stack: list[Any] = []

    async def make(**kwargs: Any) -> httpx.AsyncClient:
        from mnemoscope.service import create_app

        kwargs.setdefault("auth", TOKENS)
        kwargs.setdefault("poll_interval", 0.05)
        kwargs.setdefault("lock_ttl", 2.0)
        app = create_app(kwargs.pop("factory", svc_factory.make_agent), **kwargs)
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        stack.append(lifespan)
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://svc", timeout=20
        )
        stack.append(client)
        client.app = app  # type: ignore[attr-defined]
        return client

    yield make
    for item in reversed(stack):
        if isinstance(item, httpx.AsyncClient):
            await item.aclose()
        else:
            await item.__aexit__(None, None, None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Worker:
    """One ``mnemoscope serve`` process on a free port."""

    def __init__(
        self, store: str, tokens: Path, env: dict[str, str], log: Path, args: list[str]
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [
            sys.executable, "-m", "mnemoscope", "serve", "svc_factory:make_agent",
            "--store", store, "--tokens", str(tokens), "--host", "127.0.0.1",
            "--port", str(self.port), "--lock-ttl", "2", "--poll-interval", "0.1",
            "--shutdown-deadline", env.pop("SHUTDOWN_DEADLINE", "5"), *args,
        ]  # fmt: skip
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=self._log_file, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited: {self.log.read_text()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"worker not ready in {timeout}s: {self.log.read_text()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log_file.close()

    def terminate(self) -> None:
        """SIGTERM: a graceful shutdown starts."""
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.kill()


@pytest.fixture
def workers(tmp_path: Path, unique_id: str) -> Iterator[Any]:
    """``start(store_url, n=2, memory_url=...)`` -> ready :class:`Worker`s, killed at the end."""
    started: list[Worker] = []
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("".join(f"{t} {u}\n" for t, u in TOKENS.items()))

    def start(
        store: str,
        n: int = 2,
        memory_url: str = "memory://",
        args: tuple[str, ...] = (),
        **extra_env: str,
    ) -> list[Worker]:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "src")]),
            "MNEMOSCOPE_TEST_MEMORY_URL": memory_url,
            "MNEMOSCOPE_TEST_PREFIX": f"svctest{unique_id}",
            **extra_env,
        }
        new = [
            Worker(store, tokens, dict(env), tmp_path / f"worker{len(started) + i}.log", list(args))
            for i in range(n)
        ]
        started.extend(new)
        for w in new:
            w.wait_ready()
        return new

    yield start
    for w in started:
        w.kill()


async def drop_store_data(store: Any) -> None:
    """Remove what a test's store wrote on a shared server (its own prefix only)."""
    if store.url.startswith("postgres"):
        if store._pool is None:
            await store.open()
        async with store._pool.acquire() as conn:
            for t in ("events", "replies", "sessions"):
                await conn.execute(f"DROP TABLE IF EXISTS {store.table_prefix}_{t} CASCADE")
            await conn.execute(f"DROP SEQUENCE IF EXISTS {store.table_prefix}_fence")
    elif store.url.startswith("redis"):
        async for key in store.client.scan_iter(match=f"{store.key_prefix}:*"):
            await store.client.delete(key)


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def any_store(request: Any, unique_id: str, tmp_path: Path) -> AsyncIterator[Any]:
    """A fresh service store of each kind (unique prefix on the shared servers)."""
    from mnemoscope.service import InMemoryServiceStore, SQLiteServiceStore

    if request.param == "memory":
        yield InMemoryServiceStore()
        return
    if request.param == "sqlite":
        yield SQLiteServiceStore(f"sqlite:///{tmp_path / 'service.db'}")
        return
    if request.param == "redis":
        from mnemoscope.service import RedisServiceStore

        store: Any = RedisServiceStore(
            request.getfixturevalue("redis_url"), key_prefix=f"svc{unique_id}"
        )
    else:
        from mnemoscope.service import PostgresServiceStore

        store = PostgresServiceStore(
            request.getfixturevalue("postgres_url"), table_prefix=f"svc{unique_id}"
        )
    yield store
    cleanup = type(store)(
        store.url,
        **(
            {"key_prefix": store.key_prefix}
            if request.param == "redis"
            else {"table_prefix": store.table_prefix}
        ),
    )
    await drop_store_data(cleanup)
    await cleanup.aclose()
