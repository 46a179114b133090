"""The SSE response of a reply: its event batches as Server-Sent Events.

One write per batch of events the store acknowledged, and the batch that ends the reply
goes in the same write as the end of the chunked body. The client going away is noticed
between batches (a waiting reader wakes at least every ``2 * poll_interval``); the reply
itself runs on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from starlette.responses import StreamingResponse

from mnemoscope.service._events import SSE_KEEPALIVE, TERMINAL_TYPES, sse_frame
from mnemoscope.service._store import StoredEvent

KEEPALIVE_EVERY = 15.0
"""Seconds between SSE keep-alive comments while a reply is silent."""


class EventStreamResponse(StreamingResponse):
    """``text/event-stream`` of ``batches`` (see module docstring)."""

    def __init__(
        self, batches: AsyncGenerator[list[StoredEvent], None], headers: dict[str, str]
    ) -> None:
        super().__init__((), media_type="text/event-stream", headers=headers)
        self.batches = batches

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        gone = asyncio.ensure_future(_disconnected(receive))
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        try:
            async for batch in self.batches:
                if gone.done():
                    return  # nobody reads: stop following (the reply runs on)
                if batch:
                    quiet_since = loop.time()
                    last = batch[-1].type in TERMINAL_TYPES
                    body = b"".join(sse_frame(e.seq, e.type, e.data) for e in batch)
                    await send({"type": "http.response.body", "body": body, "more_body": not last})
                    if last:
                        return
                elif loop.time() - quiet_since >= KEEPALIVE_EVERY:
                    quiet_since = loop.time()
                    await send(
                        {"type": "http.response.body", "body": SSE_KEEPALIVE, "more_body": True}
                    )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            gone.cancel()
            await self.batches.aclose()


async def _disconnected(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
