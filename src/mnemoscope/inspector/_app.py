"""The inspector as an ASGI application (Starlette): sign-in, sessions, model calls.

Example::

    from mnemoscope.inspector import create_inspector_app

    app = create_inspector_app(
        store="sqlite+aiosqlite:///sessions.db",   # the agents' short-term memory
        ltm="ltm.db",                             # a LocalLongTermMemory file (optional)
                                                  # (or mem0=a Mem0LongTermMemory)
        workdir="/srv/agents/{user_id}",          # agentic Markdown memory (optional)
        auth="tokens.txt",                        # or any token -> user_id callable
        audit="audit.db",
    )
    # uvicorn.run(app), or inside the service: service_app.mount("/inspect", app)

Every route resolves the signed-in user first and reads only that user's data: a session,
memory or file of another user answers 404, the same as one that does not exist.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote

from mnemoscope._optional import require
from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.inspector._audit import AuditLog
from mnemoscope.inspector._auth import (
    COOKIE_NAME,
    TokenFileAuth,
    as_resolver,
    bearer,
    csrf_value,
)
from mnemoscope.inspector._calls import (
    ModelCallSourceBase,
    ModelCallView,
    ReconstructedCallSource,
    is_reply_start,
)
from mnemoscope.inspector._html import csrf_field, e, layout, url
from mnemoscope.inspector._ltm_views import LongTermViewBase, long_term_view, open_mem0
from mnemoscope.inspector._render import render_entries
from mnemoscope.inspector._sessions import SessionReaderBase, session_reader_from_url

require("starlette", extra="inspector", feature="the inspector")

from starlette.applications import Starlette  # noqa: E402 (after the extra check)
from starlette.requests import Request  # noqa: E402
from starlette.responses import HTMLResponse, RedirectResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

logger = logging.getLogger("mnemoscope.inspector")

DEFAULT_PAGE_SIZE = 100
WorkdirFor = Callable[[str], "str | None"]


class NotFoundError(Exception):
    """Answered 404 (also for what exists but belongs to another user)."""


@dataclass
class Signed:
    user: str
    token: str
    via_cookie: bool
    root: str

    @property
    def csrf(self) -> str:
        return csrf_value(self.token)


@dataclass
class Inspector:
    """The state shared by the routes (built by :func:`create_inspector_app`)."""

    resolve: Callable[[str], Awaitable[str | None]]
    reader: SessionReaderBase | None
    ltm: LongTermViewBase | None
    workdir_for: WorkdirFor | None
    audit: AuditLog
    calls: ModelCallSourceBase
    page_size: int
    embedding_checked: dict[str, Any] = field(default_factory=dict)
    stores: dict[str, Any] = field(default_factory=dict)
    owned: list[Any] = field(default_factory=list)

    # ------------------------------------------------------------------ auth
    async def who(self, request: Request) -> Signed | None:
        root = request.scope.get("root_path", "")
        token = bearer(request.headers.get("authorization"))
        via_cookie = False
        if not token:
            token = request.cookies.get(COOKIE_NAME, "")
            via_cookie = True
        user = await self.resolve(token) if token else None
        return Signed(user, token, via_cookie, root) if user else None

    def page(
        self, who: Signed, title: str, body: str, here: str = "", status: int = 200
    ) -> Response:
        return HTMLResponse(
            layout(title, body, root=who.root, user=who.user, here=here, csrf=who.csrf),
            status_code=status,
        )

    async def aclose(self) -> None:
        """Close what the inspector created (stores built from URLs or paths)."""
        owned, self.owned = self.owned, []
        for res in reversed(owned):
            try:
                await res.aclose()
            except Exception:  # closing must go on for the others
                logger.warning("could not close %r", res, exc_info=True)

    def not_found(self, who: Signed, what: str) -> Response:
        return self.page(who, "Not found", f"<h1>Not found</h1><p>{e(what)}</p>", status=404)


async def form_of(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (no multipart dependency)."""
    body = (await request.body()).decode("utf-8", "replace")
    return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}


def signin_page(root: str, error: str = "", status: int = 401) -> Response:
    err = f'<p class="error">{e(error)}</p>' if error else ""
    body = (
        f"<h1>Sign in</h1>{err}"
        f'<form method="post" action="{e(url(root, "/signin"))}">'
        '<p><label>Access token <input type="password" name="token" autofocus '
        'autocomplete="current-password"></label> <button type="submit">Sign in</button></p>'
        "</form><p class=muted>The token is the one the service or <code>mnemoscope inspect"
        "</code> gave you; it is kept in an HttpOnly cookie of this site.</p>"
    )
    return HTMLResponse(layout("Sign in", body, root=root, user=None), status_code=status)


Handler = Callable[[Inspector, Request, Signed], Awaitable[Response]]


def guarded(insp: Inspector, handler: Handler, *, post: bool = False) -> Callable[..., Any]:
    """Resolve the user (401 with the sign-in form when none); check CSRF on cookie POSTs."""

    async def endpoint(request: Request) -> Response:
        who = await insp.who(request)
        if who is None:
            return signin_page(request.scope.get("root_path", ""))
        if post and who.via_cookie:
            form = await form_of(request)
            if form.get("csrf") != who.csrf:
                return insp.page(who, "Refused", "<h1>Refused</h1><p>stale form</p>", status=403)
        try:
            return await handler(insp, request, who)
        except NotFoundError as exc:
            return insp.not_found(who, str(exc))
        except (MemoryStoreError, UserError) as exc:
            return insp.page(
                who, "Error", f'<h1>Error</h1><p class="error">{e(exc)}</p>', status=409
            )

    return endpoint


# --------------------------------------------------------------------- sign-in
async def signin_get(insp: Inspector, request: Request) -> Response:
    root = request.scope.get("root_path", "")
    token = request.query_params.get("token", "")
    if token:  # the link `mnemoscope inspect` prints
        return await _sign_in(insp, root, token, request)
    return signin_page(root, status=200)


async def signin_post(insp: Inspector, request: Request) -> Response:
    form = await form_of(request)
    return await _sign_in(insp, request.scope.get("root_path", ""), form.get("token", ""), request)


async def _sign_in(insp: Inspector, root: str, token: str, request: Request) -> Response:
    if not token or await insp.resolve(token.strip()) is None:
        return signin_page(root, "This token is not valid.")
    resp = RedirectResponse(url(root, "/sessions"), status_code=303)
    resp.set_cookie(
        COOKIE_NAME,
        token.strip(),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=root or "/",
    )
    return resp


async def signout(insp: Inspector, request: Request, who: Signed) -> Response:
    resp = RedirectResponse(url(who.root, "/signin"), status_code=303)
    resp.delete_cookie(COOKIE_NAME, path=who.root or "/")
    return resp


async def home(request: Request) -> Response:
    return RedirectResponse(url(request.scope.get("root_path", ""), "/sessions"), status_code=303)


# -------------------------------------------------------------------- sessions
def _reader(insp: Inspector) -> SessionReaderBase:
    if insp.reader is None:
        raise NotFoundError("no session store is configured (start with --store URL)")
    return insp.reader


async def sessions(insp: Inspector, request: Request, who: Signed) -> Response:
    if insp.reader is None:
        body = "<h1>Sessions</h1><p class=notice>No session store configured (--store URL).</p>"
        return insp.page(who, "Sessions", body, "sessions")
    items = await insp.reader.list_sessions(who.user)
    rows = "".join(
        f'<tr><td><a href="{e(url(who.root, "/session", sid=s.session_id))}">'
        f"{e(s.session_id)}</a></td><td>{s.size:,}</td>"
        f'<td><a href="{e(url(who.root, "/session", sid=s.session_id, page="last"))}">'
        "latest messages</a></td></tr>"
        for s in items
    )
    body = f"<h1>Sessions of {e(who.user)}</h1>" + (
        f"<table><tr><th>session</th><th>messages</th><th></th></tr>{rows}</table>"
        if items
        else "<p class=muted>No sessions yet.</p>"
    )
    return insp.page(who, "Sessions", body, "sessions")


def _pager(root: str, sid: str, page: int, pages: int) -> str:
    def link(n: int, label: str, rel: str) -> str:
        # labels are constant markup (entities), never user data
        if n < 1 or n > pages or n == page:
            return f'<span class="off">{label}</span>'
        return f'<a rel="{rel}" href="{e(url(root, "/session", sid=sid, page=n))}">{label}</a>'

    first = link(1, "&laquo; first", "first")
    prev = link(page - 1, "&lsaquo; previous", "prev")
    nxt = link(page + 1, "next &rsaquo;", "next")
    last = link(pages, "last &raquo;", "last")
    return f'<nav class="pager">{first}{prev}<span>page {page} of {pages}</span>{nxt}{last}</nav>'


async def session(insp: Inspector, request: Request, who: Signed) -> Response:
    reader = _reader(insp)
    sid = request.query_params.get("sid", "")
    total = await reader.size(who.user, sid) if sid else 0
    if not total:
        raise NotFoundError(f"no session {sid!r}")
    size = insp.page_size
    pages = max(1, -(-total // size))
    raw = request.query_params.get("page", "1")
    try:
        page = pages if raw == "last" else min(max(1, int(raw)), pages)
    except ValueError:
        page = 1
    offset = (page - 1) * size
    # one neighbour on each side pairs tool calls with their results across page edges
    start = max(0, offset - 1)
    got = (await reader.page(who.user, sid, offset=start, limit=size + 2)).entries
    before = got[0] if offset > 0 and got else None
    entries = got[1:] if before is not None else got
    after = entries[size] if len(entries) > size else None
    entries = entries[:size]
    starts = {x.msg_id for x in entries if is_reply_start(x)}
    pager = _pager(who.root, sid, page, pages)
    body = (
        f"<h1>Session {e(sid)}</h1><p class=muted>{total:,} messages · "
        f"messages {offset + 1:,}&ndash;{offset + len(entries):,}</p>{pager}"
        + render_entries(
            entries, before=before, after=after, root=who.root, session_id=sid, reply_starts=starts
        )
        + pager
    )
    return insp.page(who, f"Session {sid}", body, "sessions")


async def session_message(insp: Inspector, request: Request, who: Signed) -> Response:
    reader = _reader(insp)
    sid = request.query_params.get("sid", "")
    mid = request.query_params.get("msg", "")
    pos = await reader.position_of(who.user, sid, mid) if sid and mid else None
    if pos is None:
        raise NotFoundError(f"no message {mid!r} in session {sid!r}")
    target = url(who.root, "/session", sid=sid, page=pos // insp.page_size + 1)
    return RedirectResponse(f"{target}#m-{quote(mid, safe='')}", status_code=303)


def _call_html(root: str, sid: str, call: ModelCallView) -> str:
    def ids(values: list[str]) -> str:
        shown = ", ".join(
            f'<a href="{e(url(root, "/session/message", sid=sid, msg=v))}">{e(v)}</a>'
            for v in values[:50]
        )
        return shown + (f" and {len(values) - 50} more" if len(values) > 50 else "")

    rows = "".join(
        f"<tr><td>{e(p.name)}</td><td class=n>{'?' if p.tokens is None else f'{p.tokens:,}'}</td>"
        f"<td>{len(p.msg_ids) or ''}</td><td>"
        + (f'<div class="text">{e(p.text)}</div>' if p.text else "")
        + (f'<div class="muted">{e(p.note)}</div>' if p.note else "")
        + f'<div class="ids">{ids(p.msg_ids)}</div></td></tr>'
        for p in call.parts
    )
    total = "?" if call.tokens is None else f"{call.tokens:,}"
    extra = "".join(
        f"<p><b>{label}</b>: <span class=ids>{ids(v)}</span></p>"
        for label, v in (
            ("dropped", call.dropped_ids),
            ("compacted", call.compacted_ids),
            ("offloaded", call.offloaded_ids),
            ("recalled", call.recalled_ids),
        )
        if v
    )
    usage = f"<p class=muted>provider usage: {e(call.usage)}</p>" if call.usage else ""
    if call.recorded_tokens:
        counted = ", ".join(f"{e(k)} {v:,}" for k, v in call.recorded_tokens.items() if v)
        usage += f'<p class="recorded">tokens as the agent counted them: {counted}</p>'

    missing = "".join(f"<li>{e(m)}</li>" for m in call.missing)
    if call.response_id:
        produced = (
            f'<a href="{e(url(root, "/session/message", sid=sid, msg=call.response_id))}">'
            f"{e(call.response_id)}</a>"
        )
    elif call.in_progress:
        produced = "nothing stored yet: the call or its tools are running (or the reply stopped)"
    else:
        produced = "nothing stored"
    running = " <span class='badge hint'>in progress</span>" if call.in_progress else ""
    return (
        f'<section class="call" data-call="{call.index}"><h2>Call {call.index} '
        f"<span class=badge>{e(call.source)}</span>{running}</h2>"
        f"<p>produced {produced} · about {total} input tokens</p>"
        f'<table class="parts"><tr><th>part</th><th>tokens</th><th>messages</th><th>what</th>'
        f"</tr>{rows}</table>{extra}{usage}"
        + (f"<p class=muted>Not shown:</p><ul class=muted>{missing}</ul>" if missing else "")
        + "</section>"
    )


async def session_calls(insp: Inspector, request: Request, who: Signed) -> Response:
    reader = _reader(insp)
    sid = request.query_params.get("sid", "")
    mid = request.query_params.get("msg", "")
    if not sid or not mid or await reader.position_of(who.user, sid, mid) is None:
        raise NotFoundError(f"no message {mid!r} in session {sid!r}")
    entries = await reader.all_entries(who.user, sid)
    calls = await insp.calls.calls(who.user, sid, mid, entries)
    back = url(who.root, "/session/message", sid=sid, msg=mid)
    # a reply still running: the page's script re-reads #calls every second (see _html.JS)
    live = bool(calls) and calls[-1].in_progress
    status = (
        '<p class="live notice">Live: this reply has not stored its answer yet; the calls '
        "below update every second while it runs.</p>"
        if live
        else ""
    )
    opening = '<div id="calls" data-live="1">' if live else '<div id="calls">'
    body = (
        f"<h1>Model calls of a reply</h1>{opening}<p>Session {e(sid)} · reply to "
        f'<a href="{e(back)}">{e(mid)}</a> · {len(calls)} model calls</p>{status}'
        + "".join(_call_html(who.root, sid, c) for c in calls)
        + ("" if calls else "<p class=muted>No model call is stored for this message.</p>")
        + "</div>"
    )
    return insp.page(who, "Model calls", body, "sessions")


# ------------------------------------------------------------------- assembly
def _workdir_for(
    workdir: str | os.PathLike[str] | WorkdirFor | None, single_user: bool
) -> WorkdirFor | None:
    if workdir is None or callable(workdir):
        return workdir
    template = os.fspath(workdir)
    if "{user_id}" not in template:
        if not single_user:
            raise UserError(
                f"workdir {template!r} would show one Markdown memory to every user: put "
                "{user_id} in it (e.g. /srv/agents/{user_id}) or pass a user_id -> workdir "
                "function"
            )
        return lambda _user: template

    def per_user(user: str) -> str | None:
        if user in (".", "..") or "/" in user or "\\" in user or "\0" in user:
            return None  # a user id that is not one path component has no workdir
        return template.replace("{user_id}", user)

    return per_user


def create_inspector_app(
    *,
    store: str | SessionReaderBase | None = None,
    auth: Any,
    ltm: Any = None,
    mem0: Any = None,
    workdir: str | os.PathLike[str] | WorkdirFor | None = None,
    audit: str | os.PathLike[str] | AuditLog | None = None,
    calls: ModelCallSourceBase | None = None,
    system_prompt: Any = None,
    max_tokens: int | None = None,
    store_prefix: str = "mnemoscope",
    embedding_model: Any = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    single_user: bool | None = None,
) -> Starlette:
    """The inspector as an ASGI app (mount it anywhere: its links follow ``root_path``).

    Args:
        store: the short-term memory store: a URL (``sqlite+aiosqlite:///x.db``,
            ``postgresql+asyncpg://...``, ``redis://...``) or a session reader.
        auth: ``token -> user_id | None`` (sync or async), a ``{token: user}`` dict or a
            token file path (lines ``token user``, or JSON).
        ltm: a :class:`~mnemoscope.memory.LocalLongTermMemory` or the path of its file.
        mem0: instead of ``ltm``, a :class:`~mnemoscope.memory.Mem0LongTermMemory` (over
            ``mem0.AsyncMemory``) or the local Qdrant directory of one (then
            ``embedding_model`` is the embedder it was written with).
        workdir: the agentic memory's workdir: a path with ``{user_id}`` in it, a
            ``user_id -> path`` function, or (one user only) a plain path.
        audit: where edits are logged (a SQLite path or an :class:`AuditLog`); ``None``
            keeps the log in memory.
        calls: where model calls come from; default :class:`ReconstructedCallSource`
            with ``system_prompt`` and ``max_tokens``.
        store_prefix: the store's ``key_prefix`` (Redis) or ``table_prefix`` (SQL).
        embedding_model: the long-term store's embedder (needed to edit a store with
            vectors, so the edited memory gets a new vector).
        page_size: messages per conversation page.
        single_user: whether only one user can sign in (allows a plain ``workdir``);
            default: true for a token table with one user.

    Raises:
        UserError: a bad ``auth``, ``store`` URL or ``page_size``, both ``ltm`` and
            ``mem0``, or a plain ``workdir`` with several users.
    """
    if page_size < 1:
        raise UserError(f"page_size must be >= 1, got {page_size}")
    if ltm is not None and mem0 is not None:
        raise UserError(
            "give ltm= (the native store) or mem0=, not both: the memory pages show one "
            "long-term store; run a second inspector for the other"
        )
    if isinstance(auth, dict | str | os.PathLike):
        auth = TokenFileAuth(auth)
    resolver = as_resolver(auth)
    if single_user is None:
        single_user = isinstance(auth, TokenFileAuth) and len(auth.users) == 1
    owned: list[Any] = []
    reader = (
        session_reader_from_url(store, prefix=store_prefix) if isinstance(store, str) else store
    )
    if isinstance(store, str):
        owned.append(reader)
    long_term = None
    if isinstance(ltm, str | os.PathLike):
        from mnemoscope.memory import LocalLongTermMemory

        ltm = LocalLongTermMemory(ltm, embedding_model=embedding_model, create=False)
        long_term = long_term_view(ltm)
        owned.append(long_term)
    elif isinstance(mem0, str | os.PathLike):
        long_term = long_term_view(open_mem0(mem0, embedding_model))
        owned.append(long_term)
    elif ltm is not None or mem0 is not None:
        long_term = long_term_view(ltm if ltm is not None else mem0)
    audit_log = audit if isinstance(audit, AuditLog) else AuditLog(audit or ":memory:")
    if not isinstance(audit, AuditLog):
        owned.append(audit_log)
    insp = Inspector(
        resolve=resolver,
        reader=reader,
        ltm=long_term,
        workdir_for=_workdir_for(workdir, single_user),
        audit=audit_log,
        calls=calls or ReconstructedCallSource(system_prompt=system_prompt, max_tokens=max_tokens),
        page_size=page_size,
        owned=owned,
    )
    from mnemoscope.inspector import _memory_views as mv

    def r(path: str, handler: Handler, *, post: bool = False) -> Route:
        return Route(path, guarded(insp, handler, post=post), methods=["POST" if post else "GET"])

    async def _signin_get(request: Request) -> Response:
        return await signin_get(insp, request)

    async def _signin_post(request: Request) -> Response:
        return await signin_post(insp, request)

    routes = [
        Route("/", home, methods=["GET"]),
        Route("/signin", _signin_get, methods=["GET"]),
        Route("/signin", _signin_post, methods=["POST"]),
        r("/signout", signout, post=True),
        r("/sessions", sessions),
        r("/session", session),
        r("/session/message", session_message),
        r("/session/calls", session_calls),
        r("/memory", mv.memory_list),
        r("/memory/item", mv.memory_item),
        r("/memory/item/edit", mv.memory_edit, post=True),
        r("/memory/item/delete", mv.memory_delete, post=True),
        r("/agentic", mv.agentic_home),
        r("/agentic/file", mv.agentic_file),
        r("/agentic/file", mv.agentic_write, post=True),
        r("/audit", mv.audit_page),
    ]

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> Any:
        try:
            yield
        finally:
            await insp.aclose()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.inspector = insp
    return app


__all__ = ["Inspector", "NotFoundError", "Signed", "create_inspector_app", "csrf_field"]
