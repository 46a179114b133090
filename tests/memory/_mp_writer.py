"""Writer process for the multi-process test (started with the ``spawn`` method)."""

from __future__ import annotations

import asyncio
from typing import Any


async def _write(
    backend: str, url: str, user_id: str, session_id: str, w: int, n: int, barrier: Any
) -> None:
    from mnemoscope.memory import AsyncSQLAlchemyMemory, RedisMemory
    from mnemoscope.message import UserMsg

    kw: dict[str, Any] = {"user_id": user_id, "session_id": session_id}
    mem = (
        RedisMemory.from_url(url, **kw) if backend == "redis" else AsyncSQLAlchemyMemory(url, **kw)
    )
    try:
        await mem.size()  # connect before the start line
        await asyncio.to_thread(barrier.wait, 120)  # all processes start writing together
        for i in range(n):
            await asyncio.sleep(0.003)  # let the other writers in between our writes
            if i % 4 == 3:  # a tool use and its result, as one batch
                await mem.add(
                    [UserMsg(f"w{w}", f"{w}:{i}:use"), UserMsg(f"w{w}", f"{w}:{i}:result")],
                    marks="pair",
                )
            else:
                await mem.add(UserMsg(f"w{w}", f"{w}:{i}"))
    finally:
        await mem.aclose()


def write(
    backend: str, url: str, user_id: str, session_id: str, w: int, n: int, barrier: Any
) -> None:
    asyncio.run(_write(backend, url, user_id, session_id, w, n, barrier))
