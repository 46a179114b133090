"""The Lua scripts of :class:`~mnemoscope.memory.RedisMemory`, one atomic script per operation.

Each script runs on the server in one ``EVALSHA``: a write and its marks, or a read of the
messages and their marks, is never seen half done. The key layout is in ``_redis_keys``.
"""

from __future__ import annotations

# KEYS: msgs, order, seq, marks, marknames.  ARGV[1]: mark key prefix, ARGV[2]: ttl (0 = none)
_LUA_PRELUDE = """
local K_MSGS, K_ORDER, K_SEQ, K_MARKS, K_NAMES = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local MARK_PREFIX = ARGV[1]
local TTL = tonumber(ARGV[2])

local function decode_marks(s)
  if not s then return {} end
  local ok, t = pcall(cjson.decode, s)
  if not ok or type(t) ~= 'table' then return {} end
  return t
end

local function set_marks(id, score, old, new)
  local newset, oldset = {}, {}
  for _, m in ipairs(new) do newset[m] = true end
  for _, m in ipairs(old) do
    oldset[m] = true
    if not newset[m] then
      redis.call('ZREM', MARK_PREFIX .. m, id)
      if redis.call('EXISTS', MARK_PREFIX .. m) == 0 then redis.call('SREM', K_NAMES, m) end
    end
  end
  for _, m in ipairs(new) do
    if not oldset[m] then
      redis.call('ZADD', MARK_PREFIX .. m, score, id)
      redis.call('SADD', K_NAMES, m)
    end
  end
  if #new == 0 then
    if #old > 0 then redis.call('HDEL', K_MARKS, id) end
  else
    redis.call('HSET', K_MARKS, id, cjson.encode(new))
  end
end

local function delete_one(id)
  if redis.call('HDEL', K_MSGS, id) == 0 then return 0 end
  redis.call('ZREM', K_ORDER, id)
  set_marks(id, 0, decode_marks(redis.call('HGET', K_MARKS, id)), {})
  return 1
end

local function touch()
  if TTL > 0 then
    for _, k in ipairs({K_MSGS, K_ORDER, K_SEQ, K_MARKS, K_NAMES}) do
      redis.call('EXPIRE', k, TTL)
    end
    for _, m in ipairs(redis.call('SMEMBERS', K_NAMES)) do
      redis.call('EXPIRE', MARK_PREFIX .. m, TTL)
    end
  end
end
"""

# ARGV[3]: on_duplicate, ARGV[4..]: id, json, marks, id, json, marks, ... where marks is
# the message's marks as a JSON list, or '' for none
_LUA_ADD = (
    _LUA_PRELUDE
    + """
local mode = ARGV[3]
local NONE = {}
if mode == 'error' then
  local dups = {}
  for i = 4, #ARGV, 3 do
    if redis.call('HEXISTS', K_MSGS, ARGV[i]) == 1 then dups[#dups + 1] = ARGV[i] end
  end
  if #dups > 0 then return {-1, dups} end
end
local added = 0
for i = 4, #ARGV, 3 do
  local id, data = ARGV[i], ARGV[i + 1]
  local marks = NONE
  if ARGV[i + 2] ~= '' then marks = cjson.decode(ARGV[i + 2]) end
  if redis.call('HSETNX', K_MSGS, id, data) == 1 then
    local seq = redis.call('INCR', K_SEQ)
    redis.call('ZADD', K_ORDER, seq, id)
    set_marks(id, seq, {}, marks)
    added = added + 1
  elseif mode ~= 'ignore' then
    redis.call('HSET', K_MSGS, id, data)
    local score = redis.call('ZSCORE', K_ORDER, id)
    set_marks(id, score, decode_marks(redis.call('HGET', K_MARKS, id)), marks)
  end
end
touch()
return {added}
"""
)

# ARGV[3..]: ids
_LUA_DELETE = (
    _LUA_PRELUDE
    + """
local n = 0
for i = 3, #ARGV do n = n + delete_one(ARGV[i]) end
touch()
return n
"""
)

# ARGV[3..]: marks
_LUA_DELETE_BY_MARK = (
    _LUA_PRELUDE
    + """
local n = 0
for i = 3, #ARGV do
  for _, id in ipairs(redis.call('ZRANGE', MARK_PREFIX .. ARGV[i], 0, -1)) do
    n = n + delete_one(id)
  end
end
touch()
return n
"""
)

# ARGV[3]: marks to add (JSON), ARGV[4]: marks to remove (JSON), ARGV[5]: '1' = all ids,
# ARGV[6..]: ids
_LUA_UPDATE_MARKS = (
    _LUA_PRELUDE
    + """
local add, remove = cjson.decode(ARGV[3]), cjson.decode(ARGV[4])
local removeset = {}
for _, m in ipairs(remove) do removeset[m] = true end
local ids = {}
if ARGV[5] == '1' then
  ids = redis.call('ZRANGE', K_ORDER, 0, -1)
else
  for i = 6, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local found = 0
for _, id in ipairs(ids) do
  local score = redis.call('ZSCORE', K_ORDER, id)
  if score then
    found = found + 1
    local old = decode_marks(redis.call('HGET', K_MARKS, id))
    local new, seen = {}, {}
    for _, m in ipairs(old) do
      if not removeset[m] and not seen[m] then new[#new + 1] = m; seen[m] = true end
    end
    for _, m in ipairs(add) do
      if not seen[m] then new[#new + 1] = m; seen[m] = true end
    end
    set_marks(id, score, old, new)
  end
end
touch()
return found
"""
)

_LUA_CLEAR = (
    _LUA_PRELUDE
    + """
for _, m in ipairs(redis.call('SMEMBERS', K_NAMES)) do redis.call('DEL', MARK_PREFIX .. m) end
redis.call('DEL', K_MSGS, K_ORDER, K_SEQ, K_MARKS, K_NAMES)
return 1
"""
)

# ARGV[3]: last_n (-1 = all), ARGV[4]: wanted marks (JSON), ARGV[5]: excluded marks (JSON),
# ARGV[6]: '1' to return marks too.  Returns id, json[, marks], id, json[, marks], ... as
# length-prefixed items ("<bytes>:<item>") concatenated in groups: a few hundred bulk replies
# are parsed far faster by the client than 2n (or 3n) replies.
# ARGV[6] = '2' (what get() asks first): the ids as one JSON list, then the documents
# comma-joined in groups of ARGV[7] documents, so that the client decodes the whole reply as
# one JSON array. A client parsing replies in C (hiredis) asks for groups of 1: the
# documents as they are, no copy in Lua; the pure-Python parser costs a few microseconds per
# bulk string, and is sent groups of 256.
_LUA_GET = (
    _LUA_PRELUDE
    + """
local last_n = tonumber(ARGV[3])
local want, excl = cjson.decode(ARGV[4]), cjson.decode(ARGV[5])
local with_marks = ARGV[6] == '1'
if last_n == 0 then return {} end
local ids
local source = K_ORDER
if #want == 1 then source = MARK_PREFIX .. want[1] end
if #want <= 1 then
  if last_n > 0 and #excl == 0 then
    ids = redis.call('ZRANGE', source, -last_n, -1)
  else
    ids = redis.call('ZRANGE', source, 0, -1)
  end
else
  local seen, scores = {}, {}
  ids = {}
  for _, m in ipairs(want) do
    local r = redis.call('ZRANGE', MARK_PREFIX .. m, 0, -1, 'WITHSCORES')
    for i = 1, #r, 2 do
      if not seen[r[i]] then
        seen[r[i]] = true
        ids[#ids + 1] = r[i]
        scores[r[i]] = tonumber(r[i + 1])
      end
    end
  end
  table.sort(ids, function(a, b) return scores[a] < scores[b] end)
end
if #excl > 0 or (last_n > 0 and #ids > last_n) then
  local picked = {}
  for i = #ids, 1, -1 do
    local id, keep = ids[i], true
    for _, m in ipairs(excl) do
      if redis.call('ZSCORE', MARK_PREFIX .. m, id) then keep = false; break end
    end
    if keep then
      picked[#picked + 1] = id
      if last_n > 0 and #picked >= last_n then break end
    end
  end
  ids = {}
  for i = #picked, 1, -1 do ids[#ids + 1] = picked[i] end
end
-- visit(id, data, marks) for each id still stored, in order; HMGET in chunks (unpack has
-- a stack limit); marks is nil unless with_marks
local function each_stored(visit)
  for c = 1, #ids, 1000 do
    local chunk = {unpack(ids, c, math.min(c + 999, #ids))}
    local datas = redis.call('HMGET', K_MSGS, unpack(chunk))
    local markss = with_marks and redis.call('HMGET', K_MARKS, unpack(chunk)) or nil
    for i, id in ipairs(chunk) do
      if datas[i] then visit(id, datas[i], markss and (markss[i] or '[]')) end
    end
  end
end
-- parts are joined by sep into groups of `size` parts (short concatenations are cheap in
-- Lua; one multi-megabyte table.concat is not); the client joins the few hundred groups
local out, group, n = {}, {}, 0
local sep, size = '', 96
local function push(part)
  if size == 1 then
    out[#out + 1] = part
    return
  end
  n = n + 1
  group[n] = part
  if n >= size then
    out[#out + 1] = table.concat(group, sep, 1, n)
    n = 0
  end
end
if ARGV[6] == '2' then
  local found = {}
  out[1], sep, size = '', ',', tonumber(ARGV[7])
  each_stored(function(id, data)
    found[#found + 1] = id
    push(data)
  end)
  if #found == 0 then return {} end
  out[1] = cjson.encode(found)
else
  each_stored(function(id, data, marks)
    push(#id .. ':' .. id)
    push(#data .. ':')
    push(data)
    if marks then push(#marks .. ':' .. marks) end
  end)
end
if n > 0 then out[#out + 1] = table.concat(group, sep, 1, n) end
return out
"""
)

_LUA_GET_MARKS = (
    _LUA_PRELUDE
    + """
if redis.call('HEXISTS', K_MSGS, ARGV[3]) == 0 then return false end
return redis.call('HGET', K_MARKS, ARGV[3]) or '[]'
"""
)
