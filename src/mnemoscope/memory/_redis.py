"""Session store on Redis: shared by every agent process that reaches the server.

Example::

    memory = RedisMemory.from_url("redis://localhost:6379/0", user_id="alice", session_id="s1")
    await memory.add(UserMsg("alice", "hi"), marks="greeting")
    await memory.get(last_n=10)
    await memory.aclose()  # closes the client it created; never one you passed in

Key layout (``<user>`` and ``<session>`` are escaped: ``%``, ``:``, ``{``, ``}`` become
``%25``, ``%3A``, ``%7B``, ``%7D``). The ``{...}`` hash tag puts every key of a session in
one Redis Cluster slot, so each operation is a single atomic Lua script:

===============================================  ======  ===================================
key                                              type    holds
===============================================  ======  ===================================
``<prefix>:{<user>:<session>}:msgs``             HASH    message id -> ``Msg`` JSON
``<prefix>:{<user>:<session>}:order``            ZSET    message id scored by its sequence
``<prefix>:{<user>:<session>}:seq``              STRING  sequence counter (``INCR``)
``<prefix>:{<user>:<session>}:marks``            HASH    message id -> JSON list of marks
``<prefix>:{<user>:<session>}:marknames``        SET     marks in use in the session
``<prefix>:{<user>:<session>}:mark:<mark>``      ZSET    ids carrying ``<mark>`` (same scores)
===============================================  ======  ===================================

Costs: ``add`` is O(log n) per message (``HSETNX`` detects duplicates in O(1)); reading by
mark touches only that mark's sorted set. With ``ttl`` set, every write refreshes the
expiry of all the session's keys (reads do not).

Faults: a batch is one Lua script, so Redis applies it entirely or not at all, even when
the connection drops mid-call. A dropped connection is re-established and the call retried
once when repeating it is harmless (reads, ``add`` with ``on_duplicate`` ``"ignore"`` or
``"replace"``, deletes, mark updates, ``clear``). ``add(..., on_duplicate="error")`` first
looks at what is stored: its own batch found means done, none of it means send again;
otherwise (or when the server stays unreachable) it raises
:class:`~mnemoscope.errors.MemoryStoreError`, the batch stored entirely or not at all.
After a retried ``add`` with ``"ignore"`` the returned count may undercount. A server that
refuses the connection gives "could not connect to Redis at host:port: is it running?".

Replies are always read as bytes (``NEVER_DECODE``), whatever the client's
``decode_responses``: a stored row that is not valid UTF-8 is then a corrupt record like
any other (skipped and reported, see :class:`~mnemoscope.memory.MemoryBase`) instead of a
``UnicodeDecodeError`` raised by the client for every read of the session.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from mnemoscope._optional import require
from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.memory._base import AddRequest, GetQuery, MarkUpdate, MemoryBase
from mnemoscope.memory._msg_json import decode_joined
from mnemoscope.memory._redis_keys import session_key_base
from mnemoscope.memory._redis_lua import (
    _LUA_ADD,
    _LUA_CLEAR,
    _LUA_DELETE,
    _LUA_DELETE_BY_MARK,
    _LUA_GET,
    _LUA_GET_MARKS,
    _LUA_UPDATE_MARKS,
)
from mnemoscope.message import Msg

redis_asyncio = require("redis.asyncio", extra="redis", feature="RedisMemory")

from redis.asyncio.retry import Retry  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402 (after the extra check)
from redis.client import NEVER_DECODE  # noqa: E402
from redis.exceptions import ConnectionError as RedisConnectionError  # noqa: E402
from redis.exceptions import NoScriptError, RedisError  # noqa: E402
from redis.exceptions import TimeoutError as RedisTimeoutError  # noqa: E402
from redis.utils import HIREDIS_AVAILABLE  # noqa: E402

DEFAULT_URL = "redis://localhost:6379/0"
"""Used when neither ``client`` nor ``url`` is given."""

KEY_MSGS = "{base}:msgs"
KEY_ORDER = "{base}:order"
KEY_SEQ = "{base}:seq"
KEY_MARKS = "{base}:marks"
KEY_MARK_NAMES = "{base}:marknames"
KEY_MARK = "{base}:mark:{mark}"

_RAW = {NEVER_DECODE: True}  # read replies as bytes, whatever decode_responses says

# documents per bulk string of get's reply: hiredis parses a bulk string in well under a
# microsecond, so each document comes as it is stored; redis-py's own parser spends a few
# microseconds on each, so the script joins them in groups (a copy in Lua, cheaper than that)
_DOCS_PER_GROUP = "1" if HIREDIS_AVAILABLE else "256"


def _text(value: Any) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def _marks_of(raw: Any) -> list[str]:
    """A stored marks list (JSON); an undecodable one counts as no marks, as in the scripts."""
    try:
        marks = json.loads(raw)
    except ValueError:  # invalid JSON or UTF-8
        return []
    return sorted(m for m in marks if isinstance(m, str)) if isinstance(marks, list) else []


class RedisMemory(MemoryBase):
    """Session store on a Redis server (``redis.asyncio``), safe for many processes.

    Args:
        client: a ``redis.asyncio.Redis`` (or ``RedisCluster``) you own; it is never closed
            by this object. ``decode_responses`` may be on or off. A URL string here is
            the same as ``url=``.
        url: build a client from this URL (``redis://``, ``rediss://`` for TLS,
            ``unix://``) instead; closed by :meth:`aclose`. Defaults to
            ``redis://localhost:6379/0`` when ``client`` is not given either.
        user_id: whose session this is.
        session_id: which session of that user.
        key_prefix: first part of every key, e.g. the application name.
        ttl: expire the whole session this long after its last write (seconds or a
            ``timedelta``); ``None`` keeps it forever.
        **redis_kwargs: passed to ``redis.asyncio.Redis.from_url`` when building a client.

    Raises:
        UserError: both ``client`` and ``url`` given, a ``client`` that is neither a client
            nor a URL, a ``key_prefix`` containing ``{`` or ``}``, or a non-positive ``ttl``.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        url: str | None = None,
        user_id: str = "default",
        session_id: str = "default",
        key_prefix: str = "mnemoscope",
        ttl: float | timedelta | None = None,
        **redis_kwargs: Any,
    ) -> None:
        super().__init__(user_id=user_id, session_id=session_id)
        if isinstance(client, str):  # RedisMemory("redis://..."): a URL, as from_url takes
            if url is not None:
                raise UserError("RedisMemory: pass the URL once, as client or url=, not both")
            client, url = None, client
        elif client is not None and not hasattr(client, "register_script"):
            raise UserError(
                "RedisMemory: client must be a redis.asyncio.Redis or RedisCluster, got "
                f"{type(client).__name__}; to connect by URL use "
                "RedisMemory.from_url('redis://host:6379/0', ...)"
            )
        if client is not None and (url is not None or redis_kwargs):
            raise UserError(
                "RedisMemory: pass either client= or url= (with client options), not both"
            )
        if not key_prefix or "{" in key_prefix or "}" in key_prefix:
            raise UserError(
                f"RedisMemory: key_prefix must be non-empty and contain no '{{' or '}}' "
                f"(they delimit the cluster hash tag), got {key_prefix!r}"
            )
        if isinstance(ttl, timedelta):
            ttl = ttl.total_seconds()
        if ttl is not None and ttl <= 0:
            raise UserError(f"RedisMemory: ttl must be positive seconds or None, got {ttl!r}")
        self.ttl = None if ttl is None else max(1, round(ttl))
        self.key_prefix = key_prefix
        self._owns_client = client is None
        if client is None:
            # Our own retry layer decides what may be repeated; the client must not
            # silently re-send a non-idempotent script.
            redis_kwargs.setdefault("retry", Retry(NoBackoff(), 0))
            client = redis_asyncio.Redis.from_url(url or DEFAULT_URL, **redis_kwargs)
        self.client = client
        base = session_key_base(key_prefix, user_id, session_id)
        self._keys = [
            k.format(base=base) for k in (KEY_MSGS, KEY_ORDER, KEY_SEQ, KEY_MARKS, KEY_MARK_NAMES)
        ]
        self._mark_prefix = KEY_MARK.format(base=base, mark="")
        self._head = [self._mark_prefix, str(self.ttl or 0)]
        # with hiredis, the whole session is read with MULTI on a plain client that does
        # not decode replies; otherwise the read script (without hiredis, parsing 2n bulk
        # strings in Python costs more than the script's copies; a cluster client's
        # pipelines may not support transactions; a decoding client would decode EXEC's
        # reply, which NEVER_DECODE does not reach)
        self._read_multi = (
            HIREDIS_AVAILABLE
            and isinstance(client, redis_asyncio.Redis)
            and not client.connection_pool.connection_kwargs.get("decode_responses", False)
        )
        reg = client.register_script
        self._add_script = reg(_LUA_ADD)
        self._delete_script = reg(_LUA_DELETE)
        self._delete_by_mark_script = reg(_LUA_DELETE_BY_MARK)
        self._update_marks_script = reg(_LUA_UPDATE_MARKS)
        self._clear_script = reg(_LUA_CLEAR)
        self._get_script = reg(_LUA_GET)
        self._get_marks_script = reg(_LUA_GET_MARKS)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        user_id: str = "default",
        session_id: str = "default",
        key_prefix: str = "mnemoscope",
        ttl: float | timedelta | None = None,
        **redis_kwargs: Any,
    ) -> RedisMemory:
        """Build a memory with its own client (closed by :meth:`aclose`).

        Example:
            ``RedisMemory.from_url("rediss://:secret@cache:6380/0", session_id="s1")``
        """
        return cls(
            url=url,
            user_id=user_id,
            session_id=session_id,
            key_prefix=key_prefix,
            ttl=ttl,
            **redis_kwargs,
        )

    def key(self, name: str) -> str:
        """The Redis key of this session's ``msgs``/``order``/``seq``/``marks``/``marknames``
        structure, or ``mark:<mark>`` for a mark's sorted set (for inspection tools)."""
        if name.startswith("mark:"):
            return self._mark_prefix + name[5:]
        names = ["msgs", "order", "seq", "marks", "marknames"]
        if name not in names:
            raise UserError(f"unknown key name {name!r}; one of {names} or 'mark:<mark>'")
        return self._keys[names.index(name)]

    # ------------------------------------------------------------------ plumbing
    async def _command(self, *args: Any) -> Any:
        """One command whose reply is read as bytes, whatever ``decode_responses`` says."""
        return await self.client.execute_command(*args, **{NEVER_DECODE: True})

    async def _eval(self, script: Any, args: list[Any]) -> Any:
        keys = self._keys
        try:
            return await self._command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:  # a restarted or another server: load it, as Script does
            script.sha = _text(await self.client.script_load(script.script))
            return await self._command("EVALSHA", script.sha, len(keys), *keys, *args)

    async def _call(self, script: Any, args: list[Any], *, retry_safe: bool, what: str) -> Any:
        return await self._retrying(
            lambda: self._eval(script, self._head + args), retry_safe=retry_safe, what=what
        )

    async def _retrying(self, op: Any, *, retry_safe: bool, what: str) -> Any:
        for attempt in (0, 1):
            try:
                return await op()
            except (RedisConnectionError, RedisTimeoutError) as exc:
                if retry_safe and attempt == 0:
                    continue  # the pool hands out a fresh connection
                raise self._connection_error(exc, retry_safe=retry_safe, what=what) from exc
            except RedisError as exc:
                raise MemoryStoreError(f"RedisMemory.{what} failed: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _connection_error(
        self, exc: BaseException, *, retry_safe: bool, what: str
    ) -> MemoryStoreError:
        if "connecting to" in str(exc).lower():  # redis-py's words for a failed connect
            return MemoryStoreError(
                f"RedisMemory.{what} failed: could not connect to Redis at "
                f"{_address(self.client)}: is it running? ({exc})"
            )
        hint = (
            " The batch was stored entirely or not at all; check with get_marks()."
            if not retry_safe
            else ""
        )
        return MemoryStoreError(
            f"RedisMemory.{what} failed: connection to Redis lost ({exc}).{hint}"
        )

    # ------------------------------------------------------------------- writing
    async def _add(self, request: AddRequest) -> int:
        plan, on_duplicate = request.marks, request.on_duplicate
        args: list[Any] = [*self._head, on_duplicate]
        if isinstance(plan, list):  # the same marks for every message: encoded once
            encoded = json.dumps(plan) if plan else ""
            for msg, doc in zip(request.msgs, request.docs, strict=True):
                args += (msg.id, doc, encoded)
        else:
            for msg, doc in zip(request.msgs, request.docs, strict=True):
                own = plan.get(msg.id)
                args += (msg.id, doc, json.dumps(own) if own else "")
        if on_duplicate == "error":
            result = await self._add_exactly_once(args)
        else:
            result = await self._add_call(args)
        if int(result[0]) < 0:
            dups = [_text(d) for d in result[1]]
            raise MemoryStoreError(
                f"message ids already stored: {dups[:5]}; pass on_duplicate='ignore' or 'replace'"
            )
        return int(result[0])

    async def _add_call(self, args: list[Any]) -> Any:
        """The add script, retried once on a dropped connection (``"ignore"``/``"replace"``
        are idempotent). The hot path of every agent step: no closures, one ``EVALSHA``."""
        script, keys = self._add_script, self._keys
        for attempt in (0, 1):
            try:
                try:
                    return await self.client.execute_command(
                        "EVALSHA", script.sha, len(keys), *keys, *args, **_RAW
                    )
                except NoScriptError:  # a restarted or another server: load it again
                    script.sha = _text(await self.client.script_load(script.script))
                    return await self.client.execute_command(
                        "EVALSHA", script.sha, len(keys), *keys, *args, **_RAW
                    )
            except (RedisConnectionError, RedisTimeoutError) as exc:
                if attempt == 0:
                    continue  # the pool hands out a fresh connection
                raise self._connection_error(exc, retry_safe=True, what="add") from exc
            except RedisError as exc:
                raise MemoryStoreError(f"RedisMemory.add failed: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _add_exactly_once(self, args: list[Any]) -> Any:
        """``on_duplicate="error"``: a blind retry could report our own batch as a duplicate.

        When the connection drops, look at what is stored: our exact JSON for every id means
        the script ran; none of the ids means it did not (scripts are atomic) and it is
        sent again; anything else is reported as an unknown outcome.
        """

        def send() -> Any:
            return self._retrying(
                lambda: self._eval(self._add_script, args), retry_safe=False, what="add"
            )

        try:
            return await send()
        except MemoryStoreError as exc:
            if not isinstance(exc.__cause__, (RedisConnectionError, RedisTimeoutError)):
                raise
            body = args[len(self._head) + 1 :]  # id, json, marks, id, json, marks, ...
            wanted = dict(zip(body[0::3], body[1::3], strict=True))
            try:
                stored = await self._command("HMGET", self._keys[0], *wanted)
            except RedisError:
                raise exc from exc.__cause__
            if all(
                s is not None and _text(s) == j
                for s, j in zip(stored, wanted.values(), strict=True)
            ):
                return [len(wanted)]
            if any(s is not None for s in stored):
                raise
            return await send()

    async def _delete(self, ids: list[str]) -> int:
        return int(await self._call(self._delete_script, ids, retry_safe=True, what="delete"))

    async def _delete_by_mark(self, marks: list[str]) -> int:
        return int(
            await self._call(
                self._delete_by_mark_script, marks, retry_safe=True, what="delete_by_mark"
            )
        )

    async def _update_marks(self, update: MarkUpdate) -> int:
        every = update.ids is None
        args = [json.dumps(update.add), json.dumps(update.remove), "1" if every else "0"]
        args += update.ids or []
        return int(
            await self._call(self._update_marks_script, args, retry_safe=True, what="update_marks")
        )

    async def _clear(self) -> None:
        await self._call(self._clear_script, [], retry_safe=True, what="clear")

    # ------------------------------------------------------------------- reading
    async def _read(self, query: GetQuery, mode: str) -> Any:
        """The read script's reply for ``query``; ``mode`` as the script documents."""
        last_n = -1 if query.last_n is None else query.last_n
        args = [last_n, json.dumps(query.marks), json.dumps(query.exclude_marks), mode]
        if mode == "2":
            args.append(_DOCS_PER_GROUP)
        return await self._call(self._get_script, args, retry_safe=True, what="get")

    async def _fetch(self, query: GetQuery, with_marks: bool) -> list[Any]:
        groups = await self._read(query, "1" if with_marks else "0")
        return _split_items(b"".join(g.encode() if isinstance(g, str) else g for g in groups))

    async def _get(self, query: GetQuery) -> list[Msg]:
        # one JSON array of every document, decoded in one call; a corrupt row makes that
        # fail, and the rows are decoded one by one to find and report it
        whole = not (query.marks or query.exclude_marks or query.last_n)
        if whole and self._read_multi:
            ids, docs = await self._retrying(self._read_whole, retry_safe=True, what="get")
            return self._decode(ids, docs, query.on_corrupt)
        reply = await self._read(query, "2")
        if not reply:
            return []
        try:
            ids = json.loads(reply[0])
        except ValueError:  # an id that is not UTF-8
            ids = None
        if isinstance(ids, list):
            msgs = decode_joined(ids, b"[" + b",".join(reply[1:]) + b"]")
            if msgs is not None:
                return msgs
        flat = await self._fetch(query, with_marks=False)
        return self._decode(flat[0::2], flat[1::2], query.on_corrupt)

    async def _read_whole(self) -> tuple[list[bytes], list[bytes]]:
        """Ids and documents of the whole session, in order: ``ZRANGE`` and ``HGETALL`` in
        one ``MULTI`` (one round trip, one snapshot, no Lua: the server copies the replies
        straight out of its structures)."""
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.execute_command("ZRANGE", self._keys[1], 0, -1, **_RAW)
            pipe.execute_command("HGETALL", self._keys[0], **_RAW)
            order, by_id = await pipe.execute()
        ids = [i for i in order if i in by_id]  # both are written by one script: all are
        return ids, [by_id[i] for i in ids]

    async def _get_marks(self, msg_id: str) -> list[str] | None:
        raw = await self._call(self._get_marks_script, [msg_id], retry_safe=True, what="get_marks")
        if raw is None:
            return None
        return _marks_of(raw)

    async def _size(self) -> int:
        return int(
            await self._retrying(
                lambda: self._command("HLEN", self._keys[0]), retry_safe=True, what="size"
            )
        )

    async def _export_rows(self) -> list[tuple[Any, Any, list[str]]]:
        # one round trip: messages and marks read atomically
        flat = await self._fetch(GetQuery(None, [], [], "raise"), with_marks=True)
        return [(flat[i], flat[i + 1], _marks_of(flat[i + 2])) for i in range(0, len(flat), 3)]

    # ----------------------------------------------------------------- lifecycle
    async def aclose(self) -> None:
        """Close the client if this object created it."""
        if self._owns_client:
            await self.client.aclose()


def _address(client: Any) -> str:
    """``host:port`` (or the socket path) the client connects to, without credentials."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or {}
    if kwargs.get("path"):
        return str(kwargs["path"])
    if "host" in kwargs:
        return f"{kwargs['host']}:{kwargs.get('port', 6379)}"
    return "the configured nodes"


def _split_items(blob: bytes) -> list[bytes]:
    """Items of a ``<bytes>:<item><bytes>:<item>...`` string (the read script's reply)."""
    out: list[bytes] = []
    pos, end = 0, len(blob)
    find = blob.index
    while pos < end:
        colon = find(b":", pos)
        start = colon + 1
        stop = start + int(blob[pos:colon])
        out.append(blob[start:stop])
        pos = stop
    return out
