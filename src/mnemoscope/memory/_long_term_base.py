"""The long-term memory contract: cross-session facts, scoped by user, agent and run.

A :class:`LongTermMemoryBase` stores short texts ("memories") and retrieves them by
relevance to a query. Its public ``record``/``retrieve`` (signatures and documentation)
are defined here once; a store implements the protected hooks ``_record`` and
``_retrieve``, which receive the call as one :class:`RecordRequest` /
:class:`RetrieveRequest`. Control modes, the ``search_memory``/``add_memory`` tools,
write-back and injection are built once on top of this contract by the generic
long-term-memory middleware, so every store gets them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from mnemoscope.memory._base import AsyncResource
from mnemoscope.message import Msg


class MemoryScope(BaseModel):
    """Who a memory belongs to. ``user_id`` is required; the others narrow it."""

    user_id: str
    agent_id: str | None = None
    run_id: str | None = None


class MemoryItem(BaseModel):
    """One stored memory as returned by a store."""

    id: str
    content: str
    score: float | None = None
    """Relevance to the query (higher is better); ``None`` outside a search."""
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None


class RecordEvent(BaseModel):
    """What one write did to one memory."""

    event: Literal["add", "update", "delete", "skip"]
    item: MemoryItem
    reason: str | None = None
    """Why it was skipped / which memory it superseded, when known."""


class RecordResult(BaseModel):
    """Everything a :meth:`LongTermMemoryBase.record` call did."""

    events: list[RecordEvent] = Field(default_factory=list)

    @property
    def added(self) -> list[MemoryItem]:
        return [e.item for e in self.events if e.event == "add"]

    @property
    def updated(self) -> list[MemoryItem]:
        return [e.item for e in self.events if e.event == "update"]

    @property
    def skipped(self) -> list[MemoryItem]:
        return [e.item for e in self.events if e.event == "skip"]

    @property
    def stored_anything(self) -> bool:
        return any(e.event in ("add", "update") for e in self.events)


RecordInput = str | Msg | Sequence[str | Msg]


@dataclass(frozen=True)
class RecordRequest:
    """One :meth:`LongTermMemoryBase.record` call, as a store's ``_record`` receives it."""

    content: RecordInput
    scope: MemoryScope
    infer: bool | None = None
    """``None``: the store's default."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """A copy of the caller's ``metadata`` (empty when none was given)."""


@dataclass(frozen=True)
class RetrieveRequest:
    """One :meth:`LongTermMemoryBase.retrieve` call, as a store's ``_retrieve`` receives it."""

    query: str
    scope: MemoryScope
    limit: int = 5
    threshold: float | None = None


def call_scope(user_id: str, agent_id: str | None, run_id: str | None) -> MemoryScope:
    """The scope of one call, as given: each store checks the ids itself, so that its
    errors (``UserError`` naming the call) stay its own."""
    return MemoryScope.model_construct(user_id=user_id, agent_id=agent_id, run_id=run_id)


class LongTermMemoryBase(AsyncResource, ABC):
    """Async store of cross-session memories.

    A store implements :meth:`_record` and :meth:`_retrieve`; the public methods, with
    their keyword arguments, are defined here once.
    """

    async def record(
        self,
        content: RecordInput,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        infer: bool | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> RecordResult:
        """Store memories.

        Args:
            content: a text, a message, or a list of them (e.g. one exchange).
            infer: let an LLM extract standalone facts (``True``) or store the text as
                given (``False``); ``None`` uses the store's default.
        """
        request = RecordRequest(
            content, call_scope(user_id, agent_id, run_id), infer, dict(metadata or {})
        )
        return await self._record(request)

    async def retrieve(
        self,
        query: str,
        *,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = 5,
        threshold: float | None = None,
    ) -> list[MemoryItem]:
        """The memories most relevant to ``query``, best first, within the scope."""
        request = RetrieveRequest(query, call_scope(user_id, agent_id, run_id), limit, threshold)
        return await self._retrieve(request)

    @abstractmethod
    async def _record(self, request: RecordRequest) -> RecordResult:
        """Store what :meth:`record` was given."""

    @abstractmethod
    async def _retrieve(self, request: RetrieveRequest) -> list[MemoryItem]:
        """Answer :meth:`retrieve`."""

    async def aclose(self) -> None:
        """Flush and release resources. Safe to call twice."""
