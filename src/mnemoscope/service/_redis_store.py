"""The service's shared state on Redis: any number of processes on any number of machines.

Example::

    app = create_app("myapp:make_agent", store="redis://cache:6379/0", auth="tokens.txt")

Key layout (``<user>``, ``<session>`` escaped as in :class:`~mnemoscope.memory.RedisMemory`;
the ``{...}`` hash tag keeps one session's keys in one Redis Cluster slot, so every step on
a session is one atomic Lua script):

==========================================================  ======  =============================
key                                                         type    holds
==========================================================  ======  =============================
``<prefix>:user:{<user>}:sessions``                         ZSET    session ids by creation time
``<prefix>:{<user>:<session>}:session``                     HASH    ``created_at``, ``title``
``<prefix>:{<user>:<session>}:lock``                        STRING  fencing token of the holder
                                                                    (``SET NX PX``, renewed)
``<prefix>:{<user>:<session>}:fence``                       STRING  token counter (``INCR``;
                                                                    expires a day after delete)
``<prefix>:{<user>:<session>}:running``                     STRING  id of the running reply
``<prefix>:{<user>:<session>}:replies``                     ZSET    reply ids by creation time
``<prefix>:{<user>:<session>}:reply:<reply>``               HASH    ``status``, ``token``,
                                                                    ``last_seq``, ``cancel``
``<prefix>:{<user>:<session>}:events:<reply>``              STREAM  the reply's events; entry id
                                                                    ``0-<seq>``, fields ``type``,
                                                                    ``data`` (JSON)
==========================================================  ======  =============================

Stream entry ids are the event sequence numbers, so a re-attaching reader resumes with
``XREAD BLOCK ... 0-<Last-Event-ID>`` and an append repeated after a dropped connection is
recognised and kept once.
"""

from __future__ import annotations

import time
from typing import Any

from mnemoscope._optional import require
from mnemoscope.service import _store as st
from mnemoscope.service._store import AppendResult, ReplyInfo, ReplyStatus, SessionInfo, StoredEvent

redis_asyncio = require("redis.asyncio", extra="redis", feature="RedisServiceStore")

from redis.exceptions import ConnectionError as RedisConnectionError  # noqa: E402
from redis.exceptions import RedisError  # noqa: E402
from redis.exceptions import TimeoutError as RedisTimeoutError  # noqa: E402

_SCRIPTS = {
    "acquire": """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-2, ''} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {-1, redis.call('GET', KEYS[4]) or ''} end
local token = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[2], token, 'PX', ARGV[1])
local running = redis.call('GET', KEYS[4])
if running then
  local rkey = ARGV[3] .. running
  local seq = tonumber(redis.call('HGET', rkey, 'last_seq') or '0') + 1
  redis.call('XADD', ARGV[4] .. running, '0-' .. seq, 'type', 'reply_failed', 'data', ARGV[2])
  redis.call('HSET', rkey, 'status', 'failed', 'last_seq', seq)
  redis.call('DEL', KEYS[4])
end
if ARGV[5] ~= '' then
  redis.call('HSET', ARGV[3] .. ARGV[5], 'status', 'running', 'token', token,
             'created_at', ARGV[6], 'last_seq', 0, 'cancel', 0)
  redis.call('ZADD', KEYS[5], ARGV[6], ARGV[5])
  redis.call('SET', KEYS[4], ARGV[5])
end
return {token, running or ''}
""",
    "heartbeat": """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {1, 0} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('HGET', KEYS[2], 'cancel') == '1' then return {0, 1} end
return {0, 0}
""",
    "release": """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
""",
    "start": """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[3], 'status', 'running', 'token', ARGV[1], 'created_at', ARGV[3],
           'last_seq', 0, 'cancel', 0)
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2])
redis.call('SET', KEYS[2], ARGV[2])
return 1
""",
    "append": """
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('HGET', KEYS[2], 'token') ~= ARGV[1] then
  return {1, 0}
end
local cancel = 0
if redis.call('HGET', KEYS[2], 'cancel') == '1' then cancel = 1 end
local last = tonumber(redis.call('HGET', KEYS[2], 'last_seq'))
local first = tonumber(ARGV[4])
local n = (#ARGV - 4) / 2
local final = first + n - 1
if final <= last then return {0, cancel} end
if first ~= last + 1 or redis.call('HGET', KEYS[2], 'status') ~= 'running' then return {1, 0} end
for i = 0, n - 1 do
  redis.call('XADD', KEYS[3], '0-' .. (first + i), 'type', ARGV[5 + 2 * i], 'data', ARGV[6 + 2 * i])
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[2], 'status', ARGV[2], 'last_seq', final)
  redis.call('DEL', KEYS[4], KEYS[1])
else
  redis.call('HSET', KEYS[2], 'last_seq', final)
end
return {0, cancel}
""",
    "cancel": """
if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
if redis.call('HGET', KEYS[1], 'status') == 'running' then
  redis.call('HSET', KEYS[1], 'cancel', 1)
end
return redis.call('HGETALL', KEYS[1])
""",
    "delete": """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local replies = redis.call('ZRANGE', KEYS[2], 0, -1)
for _, r in ipairs(replies) do
  redis.call('DEL', ARGV[2] .. r, ARGV[3] .. r)
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[1])
redis.call('ZREM', KEYS[5], ARGV[4])
-- the token counter outlives the session for a day: a holder that stalled through the
-- delete finds higher tokens if the session is created again
redis.call('EXPIRE', KEYS[6], 86400)
return 1
""",
}
"""The Lua scripts: each step on a session is one of them, atomic."""


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace(":", "%3A").replace("{", "%7B").replace("}", "%7D")


class RedisServiceStore(st.ServerStoreBase):
    """Sessions, reply logs (Streams) and fenced session locks on Redis.

    Args:
        url: ``redis://host:6379/0``, ``rediss://`` (TLS) or ``unix://``.
        key_prefix: first part of every key.
        **redis_kwargs: passed to ``redis.asyncio.Redis.from_url`` (``max_connections``
            defaults to 2000: each reader waiting on a reply that runs in another process
            holds one connection).
    """

    server_name = "Redis"
    dropped_errors = (RedisConnectionError, RedisTimeoutError)
    driver_errors = (RedisError,)

    def __init__(self, url: str, *, key_prefix: str = "mnemoscope:svc", **redis_kwargs: Any):
        self.url = url
        self.key_prefix = key_prefix
        redis_kwargs.setdefault("decode_responses", True)
        # a reader re-attached to a reply running elsewhere holds a connection while it
        # waits (XREAD BLOCK): allow many more than redis-py's default of 100
        redis_kwargs.setdefault("max_connections", 2000)
        redis_kwargs.setdefault("health_check_interval", 30)
        self.client = redis_asyncio.Redis.from_url(url, **redis_kwargs)
        self._scripts = {name: self.client.register_script(lua) for name, lua in _SCRIPTS.items()}

    # ------------------------------------------------------------------ plumbing
    def _base(self, user_id: str, session_id: str) -> str:
        return f"{self.key_prefix}:{{{_escape(user_id)}:{_escape(session_id)}}}"

    def _index(self, user_id: str) -> str:
        return f"{self.key_prefix}:user:{{{_escape(user_id)}}}:sessions"

    async def _do(self, what: str, op: Any, *, retry: bool = True) -> Any:
        return await self._call(what, op, retry=retry)

    async def _script(
        self, what: str, name: str, keys: list[str], args: list[Any], *, retry: bool = True
    ) -> Any:
        """Run one of :data:`_SCRIPTS` (a dropped connection retried once when ``retry``)."""
        script = self._scripts[name]
        return await self._call(what, lambda: script(keys=keys, args=args), retry=retry)

    async def _hgetall_each(self, what: str, keys: list[str]) -> list[dict[str, str]]:
        """``HGETALL`` of every key in one round trip (a pipeline, not a transaction), in
        order; a missing key gives ``{}``."""
        if not keys:
            return []

        async def op() -> list[dict[str, str]]:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
            return list(await pipe.execute())

        result: list[dict[str, str]] = await self._do(what, op)
        return result

    async def aclose(self) -> None:
        await self.client.aclose()

    async def ping(self) -> None:
        await self._do("answer PING", self.client.ping)

    # ------------------------------------------------------------------ sessions
    async def create_session(self, user_id: str, session_id: str, title: str) -> SessionInfo | None:
        key = self._base(user_id, session_id) + ":session"
        now = time.time()

        async def op() -> bool:
            created = await self.client.hsetnx(key, "created_at", repr(now))
            if created:
                await self.client.hset(key, "title", title)
                await self.client.zadd(self._index(user_id), {session_id: now})
            return bool(created)

        if not await self._do("create a session", op, retry=False):
            return None
        return SessionInfo(user_id, session_id, now, title)

    async def list_sessions(self, user_id: str) -> list[SessionInfo]:
        ids = await self._do(
            "list sessions", lambda: self.client.zrange(self._index(user_id), 0, -1)
        )
        keys = [self._base(user_id, sid) + ":session" for sid in ids]
        found = await self._hgetall_each("read the sessions", keys)
        # a session deleted between the two steps has an empty hash: left out
        return [
            _session_info(user_id, sid, data) for sid, data in zip(ids, found, strict=True) if data
        ]

    async def get_session(self, user_id: str, session_id: str) -> SessionInfo | None:
        key = self._base(user_id, session_id) + ":session"
        data = await self._do("read a session", lambda: self.client.hgetall(key))
        return _session_info(user_id, session_id, data) if data else None

    async def delete_session(self, user_id: str, session_id: str, token: int) -> bool:
        base = self._base(user_id, session_id)
        keys = [f"{base}:lock", f"{base}:replies", f"{base}:session", f"{base}:running"]
        keys += [self._index(user_id), f"{base}:fence"]
        args = [token, f"{base}:reply:", f"{base}:events:", session_id]
        done = await self._script("delete a session", "delete", keys, args)
        return bool(done)

    # ---------------------------------------------------------------------- lock
    async def _acquire(
        self, key: st.SessionKey, ttl: float, failed_event: str, reply_id: str | None
    ) -> st.AcquireResult:
        base = self._base(key.user_id, key.session_id)
        keys = [f"{base}:session", f"{base}:lock", f"{base}:fence", f"{base}:running"]
        keys.append(f"{base}:replies")
        args = [_ms(ttl), failed_event, f"{base}:reply:", f"{base}:events:"]
        args += [reply_id or "", repr(time.time())]
        # not repeated: a retry after a lost answer would find our own lock and say busy
        code, reply = await self._script("take a session lock", "acquire", keys, args, retry=False)
        if code == -2:
            return st.NoSession()
        if code == -1:
            return st.Busy(reply or None)
        return st.Acquired(int(code), reply or None)

    async def _heartbeat(
        self, key: st.SessionKey, token: int, ttl: float, reply_id: str | None
    ) -> AppendResult:
        base = self._base(key.user_id, key.session_id)
        keys = [f"{base}:lock", f"{base}:reply:{reply_id or ''}"]
        fenced, cancel = await self._script(
            "renew a session lock", "heartbeat", keys, [token, _ms(ttl)]
        )
        return AppendResult(fenced=bool(fenced), cancel_requested=bool(cancel))

    async def release(self, user_id: str, session_id: str, token: int) -> None:
        keys = [self._base(user_id, session_id) + ":lock"]
        await self._script("release a session lock", "release", keys, [token])

    async def lock_token(self, user_id: str, session_id: str) -> int | None:
        key = self._base(user_id, session_id) + ":lock"
        value = await self._do("read a session lock", lambda: self.client.get(key))
        return int(value) if value else None

    # -------------------------------------------------------------------- replies
    async def start_reply(self, user_id: str, session_id: str, reply_id: str, token: int) -> bool:
        base = self._base(user_id, session_id)
        keys = [f"{base}:lock", f"{base}:running", f"{base}:reply:{reply_id}", f"{base}:replies"]
        args = [token, reply_id, repr(time.time())]
        return bool(await self._script("start a reply", "start", keys, args))

    async def _append(
        self, key: st.ReplyKey, token: int, events: list[StoredEvent], final: ReplyStatus | None
    ) -> AppendResult:
        base, rid = self._base(key.user_id, key.session_id), key.reply_id
        keys = [f"{base}:lock", f"{base}:reply:{rid}", f"{base}:events:{rid}", f"{base}:running"]
        args: list[Any] = [token, final or "", rid, events[0].seq]
        for e in events:
            args += [e.type, e.data]
        fenced, cancel = await self._script("append reply events", "append", keys, args)
        return AppendResult(fenced=bool(fenced), cancel_requested=bool(cancel))

    async def request_cancel(
        self, user_id: str, session_id: str, reply_id: str
    ) -> ReplyInfo | None:
        keys = [self._base(user_id, session_id) + f":reply:{reply_id}"]
        flat = await self._script("cancel a reply", "cancel", keys, [])
        if not flat:
            return None
        return _reply_info(reply_id, dict(zip(flat[::2], flat[1::2], strict=True)))

    async def get_reply(self, user_id: str, session_id: str, reply_id: str) -> ReplyInfo | None:
        key = self._base(user_id, session_id) + f":reply:{reply_id}"
        data = await self._do("read a reply", lambda: self.client.hgetall(key))
        return _reply_info(reply_id, data) if data else None

    async def list_replies(self, user_id: str, session_id: str) -> list[ReplyInfo]:
        base = self._base(user_id, session_id)
        ids = await self._do("list replies", lambda: self.client.zrange(f"{base}:replies", 0, -1))
        found = await self._hgetall_each("read the replies", [f"{base}:reply:{r}" for r in ids])
        # a reply deleted between the two steps has an empty hash: left out
        return [_reply_info(rid, data) for rid, data in zip(ids, found, strict=True) if data]

    async def read_events(
        self, user_id: str, session_id: str, reply_id: str, after: int, wait: float
    ) -> list[StoredEvent]:
        key = self._base(user_id, session_id) + f":events:{reply_id}"
        if wait <= 0:
            entries = await self._do(
                "read reply events", lambda: self.client.xrange(key, f"0-{after + 1}", "+")
            )
        else:
            found = await self._do(
                "read reply events",
                lambda: self.client.xread({key: f"0-{after}"}, block=max(1, int(wait * 1000))),
            )
            entries = found[0][1] if found else []
        return [
            StoredEvent(int(entry_id.split("-", 1)[1]), fields["type"], fields["data"])
            for entry_id, fields in entries
        ]


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _session_info(user_id: str, session_id: str, data: dict[str, str]) -> SessionInfo:
    return SessionInfo(user_id, session_id, float(data["created_at"]), data.get("title", ""))


def _reply_info(reply_id: str, data: dict[str, str]) -> ReplyInfo:
    status: Any = data.get("status", "running")
    return ReplyInfo(
        reply_id,
        status,
        float(data.get("created_at", 0)),
        int(data.get("last_seq", 0)),
        data.get("cancel") == "1",
    )
