"""What the service hands to an app it mounts (``create_app(mounts=...)``).

Example::

    def inspector(mount: ServiceMount) -> Starlette:
        return create_inspector_app(store=memory_url, auth=mount.authenticate)

    app = create_app(make_agent, auth="tokens.txt", mounts={"/inspector": inspector})
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mnemoscope.service._store import ServiceStoreBase

Authenticate = Callable[[str], Awaitable[str | None]]
"""The service's ``bearer token -> user id | None`` (async)."""


@dataclass(frozen=True)
class ServiceMount:
    """The service's parts a mounted app may use.

    Attributes:
        authenticate: the token check of the API routes, so the mounted app signs users in
            exactly as the service does (one token list).
        store: the service's store (sessions, reply event logs); read it only with the
            user id ``authenticate`` returned, as the service's own routes do. It is opened
            and closed by the service.
    """

    authenticate: Authenticate
    store: ServiceStoreBase


MountFactory = Callable[[ServiceMount], Any]
"""``ServiceMount -> ASGI app``: builds an app the service serves under a path prefix."""
