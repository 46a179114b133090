"""Model calls as the agent recorded them: the ``ContextEvent``s in the service's reply log.

Example::

    # in a mount factory (create_app(mounts=...)), where the service's store is at hand
    calls = ServiceEventCallSource(mount.store, reconstructed=ReconstructedCallSource(
        system_prompt="You are ...", max_tokens=8000))
    create_inspector_app(store=memory_url, auth=mount.authenticate, calls=calls)

An agent emits one :class:`~mnemoscope.events.ContextEvent` right before each model
call, and the service keeps every event of a reply in its store. This source starts from
the reconstructed views (the stored messages, so parts link to them) and, for each call
whose event is in the log, marks it ``recorded``: the tokens of each part and of the whole
input as the agent counted them, and the ids it dropped, compacted, offloaded and
recalled. Calls without an event (an agent with no budget, a session written outside the
service) stay ``reconstructed``.

A reply is found by the message that started it: the ``reply_start`` event of each of the
session's replies carries that message, read newest first and remembered per reply (a
reply's log never changes its first event); once found, a reply is read directly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from mnemoscope.events import ContextEvent
from mnemoscope.inspector._calls import (
    ModelCallSourceBase,
    ModelCallView,
    ReconstructedCallSource,
)
from mnemoscope.inspector._sessions import StoredEntry
from mnemoscope.service import ServiceStoreBase, StoredEvent

MAX_REMEMBERED = 10_000
"""Entries of each memo (reply -> message, message -> reply) before it starts over."""

_NOT_SHOWN_BY_EVENTS = ("compacted, offloaded and recalled", "what the token budget dropped")


class ServiceEventCallSource(ModelCallSourceBase):
    """Reconstructed calls, with what the agent recorded in the service's reply logs.

    Args:
        store: the service's store (``ServiceMount.store``); read with the signed-in
            user's id only.
        reconstructed: the source of the views the records are added to.
    """

    def __init__(
        self, store: ServiceStoreBase, *, reconstructed: ReconstructedCallSource | None = None
    ) -> None:
        self.store = store
        self.reconstructed = reconstructed or ReconstructedCallSource()
        self._starts: dict[tuple[str, str, str], str | None] = {}
        """(user, session, reply id) -> the id of the message that started the reply."""
        self._replies: dict[tuple[str, str, str], str] = {}
        """(user, session, message id) -> the reply it started."""

    async def calls(
        self, user_id: str, session_id: str, reply_start: str, entries: Sequence[StoredEntry]
    ) -> list[ModelCallView]:
        views = await self.reconstructed.calls(user_id, session_id, reply_start, entries)
        if not views:
            return views
        events = await self._context_events(user_id, session_id, reply_start)
        for view in views:
            event = events.get(view.index)
            if event is not None:
                _record(view, event)
        return views

    async def _context_events(
        self, user_id: str, session_id: str, reply_start: str
    ) -> dict[int, ContextEvent]:
        """The reply's context events by iteration (empty: no such reply in the log)."""
        found = self._replies.get((user_id, session_id, reply_start))
        if found is not None:  # one read, not a scan of the session's replies
            log = await self.store.read_events(user_id, session_id, found, 0, 0)
            if log:
                return _by_iteration(log)
            del self._replies[(user_id, session_id, reply_start)]  # the session was deleted
        for info in reversed(await self.store.list_replies(user_id, session_id)):
            key = (user_id, session_id, info.reply_id)
            known = key in self._starts
            if known and self._starts[key] != reply_start:
                continue
            log = await self.store.read_events(user_id, session_id, info.reply_id, 0, 0)
            if not log:
                continue  # just started: nothing written yet, not even reply_start
            if not known:
                if len(self._starts) >= MAX_REMEMBERED:
                    self._starts.clear()
                self._starts[key] = _started_by(log[0].type, log[0].data)
            if self._starts[key] == reply_start:
                if len(self._replies) >= MAX_REMEMBERED:
                    self._replies.clear()
                self._replies[(user_id, session_id, reply_start)] = info.reply_id
                return _by_iteration(log)
        return {}


def _by_iteration(log: Sequence[StoredEvent]) -> dict[int, ContextEvent]:
    events = (ContextEvent.model_validate_json(e.data) for e in log if e.type == "context")
    return {e.iteration: e for e in events}


def _started_by(event_type: str, data: str) -> str | None:
    """The id of the message a ``reply_start`` event carries."""
    if event_type != "reply_start":
        return None
    msg = json.loads(data).get("input") or {}
    value = msg.get("id") if isinstance(msg, dict) else None
    return value if isinstance(value, str) else None


def _record(view: ModelCallView, event: ContextEvent) -> None:
    view.source = "recorded"
    view.recorded_tokens = dict(event.parts)
    view.recorded_total = event.tokens
    view.dropped_ids = list(event.dropped)
    view.compacted_ids = list(event.compacted) or view.compacted_ids
    view.offloaded_ids = list(event.offloaded)
    view.recalled_ids = list(event.recalled)
    view.missing = [m for m in view.missing if not m.startswith(_NOT_SHOWN_BY_EVENTS)]
    if event.parts.get("injected"):
        view.missing = [
            f"the text of the injected long-term memories ({event.parts['injected']} tokens; "
            "it is not stored)"
            if m.startswith("injected long-term memories")
            else m
            for m in view.missing
        ]
