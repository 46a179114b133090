"""Short-term (session) and long-term (cross-session) memory.

``RedisMemory`` and ``AsyncSQLAlchemyMemory`` import their drivers lazily; a missing
driver raises an ``ImportError`` naming the extra to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mnemoscope._lazy import lazy_exports
from mnemoscope.memory._base import (
    AddRequest,
    GetQuery,
    MarkUpdate,
    MemoryBase,
    MemoryState,
    OnCorrupt,
    OnDuplicate,
    StoredMsg,
)
from mnemoscope.memory._in_memory import InMemoryMemory
from mnemoscope.memory._long_term_base import (
    LongTermMemoryBase,
    MemoryItem,
    MemoryScope,
    RecordEvent,
    RecordRequest,
    RecordResult,
    RetrieveRequest,
)
from mnemoscope.memory._redis_keys import escape_key_part, session_key_base, unescape_key_part
from mnemoscope.memory._session_store import SessionStore, SessionStoreMemory

if TYPE_CHECKING:
    from mnemoscope.memory._local_ltm import LocalLongTermMemory
    from mnemoscope.memory._ltm_schema import HistoryEntry, StoredMemoryItem
    from mnemoscope.memory._mem0 import Mem0LongTermMemory
    from mnemoscope.memory._redis import RedisMemory
    from mnemoscope.memory._sqlalchemy import AsyncSQLAlchemyMemory
    from mnemoscope.memory._sqlalchemy_common import make_tables

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "make_tables": "mnemoscope.memory._sqlalchemy_common",
        "HistoryEntry": "mnemoscope.memory._ltm_schema",
        "LocalLongTermMemory": "mnemoscope.memory._local_ltm",
        "StoredMemoryItem": "mnemoscope.memory._ltm_schema",
        "Mem0LongTermMemory": "mnemoscope.memory._mem0",
        "RedisMemory": "mnemoscope.memory._redis",
        "AsyncSQLAlchemyMemory": "mnemoscope.memory._sqlalchemy",
    },
)


__all__ = [
    "AddRequest",
    "AsyncSQLAlchemyMemory",
    "GetQuery",
    "HistoryEntry",
    "InMemoryMemory",
    "LocalLongTermMemory",
    "LongTermMemoryBase",
    "MarkUpdate",
    "Mem0LongTermMemory",
    "MemoryBase",
    "MemoryItem",
    "MemoryScope",
    "MemoryState",
    "OnCorrupt",
    "OnDuplicate",
    "RecordEvent",
    "RecordRequest",
    "RecordResult",
    "RedisMemory",
    "RetrieveRequest",
    "SessionStore",
    "SessionStoreMemory",
    "StoredMemoryItem",
    "StoredMsg",
    "escape_key_part",
    "make_tables",
    "session_key_base",
    "unescape_key_part",
]
