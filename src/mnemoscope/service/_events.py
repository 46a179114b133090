"""Events the service adds to an agent's own (:data:`~mnemoscope.middleware.AgentEvent`).

A reply's event log holds the agent's events in order, each with a sequence number
``1, 2, ...`` (the SSE ``id``), and ends with exactly one *terminal* event: the agent's
``reply_end``, or one of the two below, written by the service when the reply did not end
normally.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from mnemoscope.middleware import AgentEvent

TERMINAL_TYPES = frozenset({"reply_end", "reply_failed", "reply_cancelled"})
"""Event types that end a reply's log."""


class ReplyFailedEvent(BaseModel):
    """The reply failed: the agent raised, or the process running it was lost.

    ``reason`` is ``"error"`` (the agent or its factory raised), ``"worker_lost"`` (the
    process running it died or lost the session lock; written by the next process that
    takes the session) or ``"store_unavailable"``.
    """

    model_config = ConfigDict(extra="forbid")
    type: Literal["reply_failed"] = "reply_failed"
    reply_id: str = ""
    reason: Literal["error", "worker_lost", "store_unavailable"] = "error"
    message: str = ""


class ReplyCancelledEvent(BaseModel):
    """The reply was cancelled: ``requested`` by a client or by a newer message (the
    ``interrupt`` policy), or by a
    server ``shutdown`` that reached its deadline."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["reply_cancelled"] = "reply_cancelled"
    reply_id: str = ""
    reason: Literal["requested", "shutdown"] = "requested"


ServiceEvent = Annotated[
    AgentEvent | ReplyFailedEvent | ReplyCancelledEvent,
    Field(discriminator="type"),
]
"""Any event of a reply's log: an agent event or one of the service's terminal events."""


def sse_frame(seq: int, event_type: str, data: str) -> bytes:
    """One Server-Sent Event; ``data`` is a single-line JSON document."""
    return f"id: {seq}\nevent: {event_type}\ndata: {data}\n\n".encode()


SSE_KEEPALIVE = b": keepalive\n\n"
