"""The long-term contract: ``record``/``retrieve`` are defined once, on the base.

A store implements ``_record``/``_retrieve`` and receives each call as one request.
"""

from __future__ import annotations

import pytest

from mnemoscope.memory import (
    LongTermMemoryBase,
    MemoryItem,
    MemoryScope,
    RecordRequest,
    RecordResult,
    RetrieveRequest,
)


class EchoStore(LongTermMemoryBase):
    """Keeps the requests it is given."""

    def __init__(self) -> None:
        self.requests: list[RecordRequest | RetrieveRequest] = []

    async def _record(self, request: RecordRequest) -> RecordResult:
        self.requests.append(request)
        return RecordResult()

    async def _retrieve(self, request: RetrieveRequest) -> list[MemoryItem]:
        self.requests.append(request)
        return []


async def test_public_calls_reach_the_hooks_as_one_request() -> None:
    store = EchoStore()
    metadata = {"topic": "tea"}
    await store.record("Alice likes tea.", user_id="alice", run_id="r1", metadata=metadata)
    await store.retrieve("tea", user_id="alice", agent_id="a1", limit=3, threshold=0.5)
    await store.record("Bob likes coffee.", user_id="bob", infer=True)
    first, search, second = store.requests
    assert first == RecordRequest(
        "Alice likes tea.", MemoryScope(user_id="alice", run_id="r1"), None, {"topic": "tea"}
    )
    assert isinstance(first, RecordRequest) and first.metadata is not metadata
    assert search == RetrieveRequest("tea", MemoryScope(user_id="alice", agent_id="a1"), 3, 0.5)
    assert second == RecordRequest("Bob likes coffee.", MemoryScope(user_id="bob"), True, {})


def test_a_store_must_implement_the_hooks() -> None:
    class RecordOnly(LongTermMemoryBase):
        async def _record(self, request: RecordRequest) -> RecordResult:
            return RecordResult()

    with pytest.raises(TypeError, match="_retrieve"):
        RecordOnly()  # type: ignore[abstract]
