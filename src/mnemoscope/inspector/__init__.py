"""A web page that shows what an agent knows and what it was shown (``mnemoscope inspect``).

Sessions with their marks, tool calls paired with their results and summaries linked to
what they cover; the model calls of a reply, part by part; the long-term store (native or
mem0) and the agentic Markdown memory, editable, every edit recorded in an audit log.
Server-rendered HTML with a few lines of JavaScript: no build step, nothing fetched from the
network.

Example::

    from mnemoscope.inspector import create_inspector_app

    app = create_inspector_app(store="sqlite+aiosqlite:///sessions.db", auth="tokens.txt")

Needs the ``inspector`` extra (Starlette): ``pip install 'mnemoscope[inspector]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mnemoscope._lazy import lazy_exports
from mnemoscope.inspector._audit import AuditEntry, AuditLog
from mnemoscope.inspector._auth import TokenFileAuth, TokenResolver, load_token_file
from mnemoscope.inspector._calls import (
    ContextPart,
    ModelCallSourceBase,
    ModelCallView,
    ReconstructedCallSource,
)
from mnemoscope.inspector._sessions import (
    Page,
    RedisSessionReader,
    SessionReaderBase,
    SessionSummary,
    SQLSessionReader,
    StoredEntry,
    session_reader_from_url,
)

if TYPE_CHECKING:
    from mnemoscope.inspector._app import create_inspector_app
    from mnemoscope.inspector._service_calls import ServiceEventCallSource


__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "create_inspector_app": "mnemoscope.inspector._app",  # the 'inspector' extra
        "ServiceEventCallSource": "mnemoscope.inspector._service_calls",  # imports the service
    },
)


__all__ = [
    "AuditEntry",
    "AuditLog",
    "ContextPart",
    "ModelCallSourceBase",
    "ModelCallView",
    "Page",
    "ReconstructedCallSource",
    "RedisSessionReader",
    "SQLSessionReader",
    "ServiceEventCallSource",
    "SessionReaderBase",
    "SessionSummary",
    "StoredEntry",
    "TokenFileAuth",
    "TokenResolver",
    "create_inspector_app",
    "load_token_file",
    "session_reader_from_url",
]
