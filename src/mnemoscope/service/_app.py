"""The HTTP API: :func:`create_app` builds a FastAPI app around an agent factory.

Example::

    from mnemoscope.service import create_app

    app = create_app("myapp.agents:make_agent", store="redis://localhost:6379/0",
                     auth="tokens.txt")
    # uvicorn myapp.server:app --workers 4

Routes (all but the health checks need ``Authorization: Bearer <token>``; a session,
reply or history of another user answers 404, exactly as one that does not exist):

=======  ==========================================  ==========================================
method   path                                        does
=======  ==========================================  ==========================================
POST     ``/v1/sessions``                            create a session (201; 409 if the id exists)
GET      ``/v1/sessions``                            the caller's sessions
GET      ``/v1/sessions/{sid}``                      one session
DELETE   ``/v1/sessions/{sid}``                      delete it with its history (204; 409 busy)
POST     ``/v1/sessions/{sid}/messages``             send a message; the reply as SSE
GET      ``/v1/sessions/{sid}/replies``              the session's replies and their status
GET      ``/v1/sessions/{sid}/replies/{rid}``        one reply
GET      ``/v1/sessions/{sid}/replies/{rid}/events`` re-attach: SSE after ``Last-Event-ID``
POST     ``/v1/sessions/{sid}/replies/{rid}/cancel`` stop a running reply (202; 409 if finished)
GET      ``/v1/sessions/{sid}/history``              stored messages with their marks
GET      ``/healthz``, ``/readyz``                   liveness; readiness (the store answers)
=======  ==========================================  ==========================================

Other ASGI apps can be served by the same app under a path prefix (``mounts=``), signed in
by the service's own authenticator: ``mnemoscope serve --inspector`` mounts the inspector
at ``/inspector`` this way, without the service importing it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from mnemoscope._optional import require
from mnemoscope.errors import ServiceStoreError, UserError
from mnemoscope.memory import StoredMsg
from mnemoscope.service._auth import make_authenticator
from mnemoscope.service._events import ServiceEvent
from mnemoscope.service._mount import MountFactory, ServiceMount
from mnemoscope.service._service import (
    AgentFactory,
    AgentService,
    SessionBusyError,
    SessionNotFoundError,
    ShuttingDownError,
    load_factory,
)
from mnemoscope.service._settings import BUSY_POLICIES, BusyPolicy, ServiceSettings
from mnemoscope.service._sse import EventStreamResponse
from mnemoscope.service._store import ReplyInfo, ServiceStoreBase, SessionInfo, store_from_url

fastapi = require("fastapi", extra="service", feature="mnemoscope.service")

from fastapi import Depends, FastAPI, Header, Query, Request  # noqa: E402
from fastapi import Path as PathParam  # noqa: E402
from fastapi.responses import JSONResponse, Response, StreamingResponse  # noqa: E402
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer  # noqa: E402
from pydantic import BaseModel, Field, TypeAdapter  # noqa: E402

ID_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
"""Session and reply ids: 1-128 letters, digits, ``_``, ``.`` or ``-``."""


class SessionCreate(BaseModel):
    session_id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="your id for it; a random one if omitted"
    )
    title: str = Field(default="", max_length=200)


class SessionOut(BaseModel):
    session_id: str
    title: str
    created_at: float


class MessageIn(BaseModel):
    content: str = Field(min_length=1, max_length=100_000, description="the user's message text")
    busy_policy: BusyPolicy | None = Field(
        default=None, description="override the server's policy for a busy session"
    )


class ReplyOut(BaseModel):
    reply_id: str
    status: str
    created_at: float
    last_event_id: int
    cancel_requested: bool


class HistoryOut(BaseModel):
    session_id: str
    messages: list[StoredMsg]


class ErrorOut(BaseModel):
    detail: str


def _session_out(info: SessionInfo) -> SessionOut:
    return SessionOut(session_id=info.session_id, title=info.title, created_at=info.created_at)


def _reply_out(info: ReplyInfo) -> ReplyOut:
    return ReplyOut(
        reply_id=info.reply_id,
        status=info.status,
        created_at=info.created_at,
        last_event_id=info.last_seq,
        cancel_requested=info.cancel_requested,
    )


_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "no such session (for this user)"}
}
_SSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: `id` is the event's sequence number in the reply, "
        "`event` its type, `data` the JSON of a ServiceEvent; the last one is terminal "
        "(reply_end, reply_failed or reply_cancelled)",
        "content": {"text/event-stream": {"schema": {"$ref": "#/components/schemas/ServiceEvent"}}},
    }
}


def _retry_soon(detail: str) -> Response:
    """503 with ``Retry-After: 1``: the request may succeed if sent again (to this process
    in a second, or to another one)."""
    return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": "1"})


class _UnauthorizedError(Exception):
    pass


_bearer = HTTPBearer(auto_error=False)


async def _current_user(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The user id of the bearer token; the only user id the routes ever use."""
    authenticate = request.app.state.authenticate
    user = await authenticate(creds.credentials) if creds is not None else None
    if user is None:
        raise _UnauthorizedError
    return str(user)


RESERVED_PREFIXES = ("/v1", "/healthz", "/readyz", "/docs", "/redoc", "/openapi.json")
"""Paths of the service's own routes, which a mounted app may not take."""

User = Annotated[str, Depends(_current_user)]
Sid = Annotated[str, PathParam(pattern=ID_PATTERN)]
Rid = Annotated[str, PathParam(pattern=ID_PATTERN)]


def create_app(
    agent_factory: str | AgentFactory,
    *,
    store: str | ServiceStoreBase = "memory://",
    auth: Callable[[str], Any] | str | Path | dict[str, str] | None = None,
    busy_policy: BusyPolicy = "reject",
    lock_ttl: float = 15.0,
    poll_interval: float = 1.0,
    queue_timeout: float = 60.0,
    shutdown_deadline: float = 10.0,
    mounts: Mapping[str, MountFactory] | None = None,
) -> FastAPI:
    """An ASGI app serving ``agent_factory``'s agents to many users over ``store``.

    Args:
        agent_factory: ``"module:function"`` or the function ``(user_id, session_id) ->
            Agent`` (sync or async). It is called for each reply (and to read or clear a
            session's history); the agent's memory must be scoped to exactly that user
            and session (checked), and no tool may take a user id from the model.
        store: where sessions, reply logs and session locks live: ``memory://`` (one
            process), ``redis://...`` or ``postgresql://...`` (any number of processes), or
            a store object.
        auth: a function ``bearer token -> user id | None`` (sync or async), a token file
            path (JSON ``{"token": "user"}`` or ``token user`` lines), or such a dict.
        busy_policy: a message to a session that is answering another one is
            ``"reject"``-ed (409), ``"enqueue"``-d until the session is free (at most
            ``queue_timeout`` seconds) or ``"interrupt"``-s the running reply.
        lock_ttl: seconds the session lock outlives its holder's last heartbeat: how long
            a session stays busy after the process running its reply was killed.
        poll_interval: seconds between heartbeats (lock renewal, cancel checks).
        queue_timeout: most seconds ``enqueue``/``interrupt`` wait for a busy session.
        shutdown_deadline: on shutdown, running replies may finish for this long; the
            rest are cancelled (their logs end with ``reply_cancelled``).
        mounts: ``{"/prefix": factory}``: each factory receives a
            :class:`~mnemoscope.service.ServiceMount` (the authenticator the API routes use,
            the service's store) and returns an ASGI app served under ``/prefix`` by this
            app. A Starlette app's lifespan runs inside the service's, so what it opened is
            closed when the service stops.

    Raises:
        UserError: a bad factory spec, store URL, ``auth``, policy or mount prefix.
    """
    if busy_policy not in BUSY_POLICIES:
        raise UserError(f"busy_policy must be one of {BUSY_POLICIES}, got {busy_policy!r}")
    if lock_ttl <= 0 or poll_interval <= 0 or poll_interval * 2 >= lock_ttl:
        raise UserError(
            f"lock_ttl ({lock_ttl}) must be more than twice poll_interval ({poll_interval}), "
            "both positive, so the lock is renewed before it expires"
        )
    factory = load_factory(agent_factory)
    authenticate = make_authenticator(auth)
    the_store = store_from_url(store) if isinstance(store, str) else store
    if not isinstance(the_store, ServiceStoreBase):
        raise UserError(f"store must be a URL or a ServiceStoreBase, got {type(store).__name__}")
    for prefix in mounts or {}:
        _check_prefix(prefix)  # every prefix checked before any mounted app is built
    parts = ServiceMount(authenticate, the_store)
    mounted = {prefix: build(parts) for prefix, build in (mounts or {}).items()}
    service = AgentService(
        factory,
        the_store,
        ServiceSettings(busy_policy, lock_ttl, poll_interval, queue_timeout, shutdown_deadline),
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await the_store.open()
        try:
            async with AsyncExitStack() as stack:
                for sub in mounted.values():
                    # a mounted app's own lifespan would never run: run it here
                    lifespan_of = getattr(getattr(sub, "router", None), "lifespan_context", None)
                    if lifespan_of is not None:
                        await stack.enter_async_context(lifespan_of(sub))
                yield
        finally:
            await service.shutdown()
            await the_store.aclose()

    app = FastAPI(
        title="mnemoscope agent service",
        version="1",
        description="Sessions of an agent for many users; replies as Server-Sent Events.",
        lifespan=lifespan,
        redirect_slashes=False,  # one URL per resource; a redirect answers before auth
    )
    app.state.service = service
    app.state.authenticate = authenticate
    for prefix, sub in mounted.items():
        app.mount(prefix, sub)

    @app.exception_handler(_UnauthorizedError)
    async def _unauthorized(_r: Request, _e: Exception) -> Response:
        return JSONResponse(
            {"detail": "missing or invalid bearer token"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    @app.exception_handler(SessionNotFoundError)
    async def _not_found(_r: Request, _e: Exception) -> Response:
        return JSONResponse({"detail": "no such session"}, status_code=404)

    @app.exception_handler(SessionBusyError)
    async def _busy(_r: Request, e: Exception) -> Response:
        assert isinstance(e, SessionBusyError)
        headers = {"X-Running-Reply": e.running_reply} if e.running_reply else {}
        return JSONResponse({"detail": str(e)}, status_code=409, headers=headers)

    @app.exception_handler(ServiceStoreError)
    async def _store_down(_r: Request, e: Exception) -> Response:
        return _retry_soon(f"the service store is unavailable: {e}")

    @app.exception_handler(UserError)
    async def _misconfigured(_r: Request, e: Exception) -> Response:
        # the agent factory is wrong (a server bug, not the client's)
        return JSONResponse({"detail": f"server misconfigured: {e}"}, status_code=500)

    @app.exception_handler(ShuttingDownError)
    async def _stopping(_r: Request, _e: Exception) -> Response:
        return _retry_soon("the server is shutting down; retry on another process")

    # ------------------------------------------------------------------ health
    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """The process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {"model": ErrorOut}})
    async def readyz() -> Response:
        """The store answers and the process accepts new replies."""
        if service.stopping:
            return JSONResponse({"detail": "shutting down"}, status_code=503)
        try:
            await asyncio.wait_for(the_store.ping(), 5)
        except (ServiceStoreError, TimeoutError) as exc:
            return JSONResponse({"detail": f"store unavailable: {exc}"}, status_code=503)
        return JSONResponse({"status": "ready", "store": the_store.url.split("://", 1)[0]})

    # ---------------------------------------------------------------- sessions
    @app.post(
        "/v1/sessions",
        status_code=201,
        tags=["sessions"],
        responses={409: {"model": ErrorOut, "description": "the id exists"}},
    )
    async def create_session(user: User, body: SessionCreate | None = None) -> SessionOut:
        body = body or SessionCreate()
        return _session_out(await service.create_session(user, body.session_id, body.title))

    @app.get("/v1/sessions", tags=["sessions"])
    async def list_sessions(user: User) -> list[SessionOut]:
        return [_session_out(i) for i in await the_store.list_sessions(user)]

    async def _session(user: str, sid: str) -> SessionInfo:
        info = await the_store.get_session(user, sid)
        if info is None:
            raise SessionNotFoundError
        return info

    @app.get("/v1/sessions/{session_id}", tags=["sessions"], responses=_NOT_FOUND)
    async def get_session(user: User, session_id: Sid) -> SessionOut:
        return _session_out(await _session(user, session_id))

    @app.delete(
        "/v1/sessions/{session_id}",
        status_code=204,
        tags=["sessions"],
        responses={**_NOT_FOUND, 409: {"model": ErrorOut, "description": "a reply is running"}},
    )
    async def delete_session(user: User, session_id: Sid) -> Response:
        await service.delete_session(user, session_id)
        return Response(status_code=204)

    @app.get("/v1/sessions/{session_id}/history", tags=["sessions"], responses=_NOT_FOUND)
    async def history(user: User, session_id: Sid) -> HistoryOut:
        """The session's stored messages (the agent's short-term memory) with their marks."""
        return HistoryOut(session_id=session_id, messages=await service.history(user, session_id))

    # ----------------------------------------------------------------- replies
    def _sse(user: str, sid: str, rid: str, after: int) -> StreamingResponse:
        headers = {
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
            "X-Reply-Id": rid,
            "Location": f"/v1/sessions/{sid}/replies/{rid}",
        }
        return EventStreamResponse(service.events(user, sid, rid, after), headers)

    @app.post(
        "/v1/sessions/{session_id}/messages",
        tags=["replies"],
        response_class=StreamingResponse,
        responses={
            **_SSE,
            **_NOT_FOUND,
            409: {"model": ErrorOut, "description": "busy (reject policy) or still busy"},
            503: {"model": ErrorOut, "description": "store unavailable or shutting down"},
        },
    )
    async def post_message(user: User, session_id: Sid, body: MessageIn) -> StreamingResponse:
        """Send a message; the reply streams back as SSE. The reply runs on even if the
        client goes away: re-attach with ``GET .../replies/{X-Reply-Id}/events``."""
        runner = await service.start_reply(user, session_id, body.content, body.busy_policy)
        return _sse(user, session_id, runner.reply_id, 0)

    async def _reply(user: str, sid: str, rid: str) -> ReplyInfo:
        info = await the_store.get_reply(user, sid, rid)
        if info is None:
            raise SessionNotFoundError
        return info

    @app.get("/v1/sessions/{session_id}/replies", tags=["replies"], responses=_NOT_FOUND)
    async def list_replies(user: User, session_id: Sid) -> list[ReplyOut]:
        await _session(user, session_id)
        return [_reply_out(i) for i in await the_store.list_replies(user, session_id)]

    @app.get("/v1/sessions/{session_id}/replies/{reply_id}", tags=["replies"], responses=_NOT_FOUND)
    async def get_reply(user: User, session_id: Sid, reply_id: Rid) -> ReplyOut:
        return _reply_out(await _reply(user, session_id, reply_id))

    @app.get(
        "/v1/sessions/{session_id}/replies/{reply_id}/events",
        tags=["replies"],
        response_class=StreamingResponse,
        responses={**_SSE, **_NOT_FOUND},
    )
    async def reply_events(
        user: User,
        session_id: Sid,
        reply_id: Rid,
        last_event_id: Annotated[int | None, Header(alias="Last-Event-ID", ge=0)] = None,
        after: Annotated[int | None, Query(ge=0, description="as Last-Event-ID")] = None,
    ) -> StreamingResponse:
        """Re-attach to a running or finished reply: the events after ``Last-Event-ID``
        (header, as browsers' EventSource send it, or ``?after=``), each once, in order."""
        await _reply(user, session_id, reply_id)
        start = last_event_id if last_event_id is not None else after or 0
        return _sse(user, session_id, reply_id, start)

    @app.post(
        "/v1/sessions/{session_id}/replies/{reply_id}/cancel",
        status_code=202,
        tags=["replies"],
        responses={**_NOT_FOUND, 409: {"model": ErrorOut, "description": "already finished"}},
    )
    async def cancel_reply(user: User, session_id: Sid, reply_id: Rid) -> ReplyOut:
        info = await service.cancel(user, session_id, reply_id)
        if info is None:
            raise SessionNotFoundError
        if info.status != "running":
            raise SessionBusyError(None, f"the reply already ended ({info.status})")
        return _reply_out(info)

    _add_event_schema(app)
    return app


def _check_prefix(prefix: str) -> None:
    """A mount prefix is ``/name`` (no trailing slash) and not one of the service's routes."""
    if not prefix.startswith("/") or prefix.endswith("/") or "//" in prefix:
        raise UserError(
            f"mount prefix {prefix!r} must start with '/' and not end with one, e.g. '/inspector'"
        )
    for taken in RESERVED_PREFIXES:
        if prefix == taken or prefix.startswith(taken + "/"):
            raise UserError(
                f"mount prefix {prefix!r} would hide the service's own {taken} routes; "
                "choose another one, e.g. '/inspector'"
            )


def _add_event_schema(app: FastAPI) -> None:
    """Put the ``ServiceEvent`` schema (what SSE ``data`` holds) into the OpenAPI document."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = base()
        event = TypeAdapter(ServiceEvent).json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, sub in event.pop("$defs", {}).items():
            components.setdefault(name, sub)
        components["ServiceEvent"] = event
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
