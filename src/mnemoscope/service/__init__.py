"""Agent as a service: many users, many sessions, many processes, on Redis, PostgreSQL or
(one machine) SQLite.

:func:`create_app` builds an ASGI (FastAPI) app around an agent factory; serve it with
``mnemoscope serve module:factory`` or any ASGI server. See ``docs/service.md``.

Needs the ``service`` extra (``pip install 'mnemoscope[service]'``), plus ``redis`` or
``sql`` for the shared stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mnemoscope._lazy import lazy_exports
from mnemoscope.errors import ServiceStoreError
from mnemoscope.service._auth import StaticTokens, TokenFile, parse_tokens
from mnemoscope.service._events import (
    TERMINAL_TYPES,
    ReplyCancelledEvent,
    ReplyFailedEvent,
    ServiceEvent,
)
from mnemoscope.service._memory_store import InMemoryServiceStore
from mnemoscope.service._mount import MountFactory, ServiceMount
from mnemoscope.service._store import (
    ReplyInfo,
    ServiceStoreBase,
    SessionInfo,
    StoredEvent,
    store_from_url,
)

if TYPE_CHECKING:
    from mnemoscope.service._app import create_app
    from mnemoscope.service._asgi import ENV_PREFIX, app_from_env
    from mnemoscope.service._pg_store import PostgresServiceStore
    from mnemoscope.service._redis_store import RedisServiceStore
    from mnemoscope.service._sqlite_store import SQLiteServiceStore

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ENV_PREFIX": "mnemoscope.service._asgi",
        "app_from_env": "mnemoscope.service._asgi",
        "create_app": "mnemoscope.service._app",
        "PostgresServiceStore": "mnemoscope.service._pg_store",
        "RedisServiceStore": "mnemoscope.service._redis_store",
        "SQLiteServiceStore": "mnemoscope.service._sqlite_store",
    },
)


__all__ = [
    "ENV_PREFIX",
    "TERMINAL_TYPES",
    "InMemoryServiceStore",
    "MountFactory",
    "PostgresServiceStore",
    "RedisServiceStore",
    "ReplyCancelledEvent",
    "ReplyFailedEvent",
    "ReplyInfo",
    "SQLiteServiceStore",
    "ServiceEvent",
    "ServiceMount",
    "ServiceStoreBase",
    "ServiceStoreError",
    "SessionInfo",
    "StaticTokens",
    "StoredEvent",
    "TokenFile",
    "app_from_env",
    "create_app",
    "parse_tokens",
    "store_from_url",
]
