"""Lua scripts of :class:`~mcp_cancellation.storage.redis.RedisStorage` (private).

Every key lives under one prefix ``{name}:`` whose braces are a Redis Cluster hash tag, so
all of them hash to one slot and every script below is atomic on a cluster too. Each script
is called with ``KEYS[1]`` set to the prefix's ``scopes`` key (so a cluster client routes it
to the right node) and ``ARGV[1]`` set to the prefix itself; the other key names are built
from the prefix inside the script.

Layout (``P`` is the prefix, ``m`` a row's *member* ``<#scope>:<scope><key>``, which is
unambiguous for any bytes since the scope's byte length comes first):

=====================  ======  ============================================================
``P ages``             ZSET    every cancellation row: ``m`` -> age; TTL sweeps and the
                               global row count (``ZCARD``) come from here
``P reasons``          HASH    ``m`` -> ``-`` (no reason) or ``+<reason>``; a field exists
                               exactly when the row exists
``P s:<scope>``        ZSET    the scope's rows: ``key`` -> age (oldest first)
``P scopes``           ZSET    ``scope`` -> row count (quota check, largest scope, stats)
``P l:<n>``            ZSET    the scopes holding exactly ``n`` rows: ``scope`` -> age of
                               its oldest row (the eviction tie-break)
``P kinds``            HASH    scope kind -> row count (scrapes), and ``_v`` once the
                               counts are kept (a table from 0.1.0 is counted once)
``P clock``            STRING  last age handed out (ages strictly increase)
``P f:<m>``            HASH    in-flight owners of a request: ``owner`` -> worker id
``P fs``               HASH    ``scope`` -> in-flight row count (stats)
``P w:<worker>``       SET     the worker's in-flight rows: ``<#m>:<m><owner>``
``P workers``          SET     workers that hold in-flight rows
``P hb:<worker>``      STRING  the worker's heartbeat, with a TTL
``P c:<worker>``       (pub/sub channel) cancellations of the worker's requests
=====================  ======  ============================================================

Ages are microseconds of the Redis server's clock (``TIME``), made strictly increasing
through ``P clock`` so rows keep their insertion order exactly as the memory storage does,
whatever the workers' clocks say. Eviction picks the largest scope from ``P scopes``, then
the scope of that size whose oldest row is oldest from ``P l:<n>``: each step costs
O(log n) and touches only the rows it evicts, never a scan of every row. One call of
``ADD`` evicts at most a bounded number of rows (``RedisStorage(eviction_chunk=...)``); a
larger batch is finished by further calls, so no script blocks Redis for long. A scrape
(``SUMMARY``) reads the largest scopes the same way and the totals by kind from
``P kinds``: O(k log n).

Messages published on ``P c:<worker>`` are netstrings (``<len>:<bytes>`` concatenated):
scope, key, encoded reason, then the ids of that worker's owners that track the request.
"""

from __future__ import annotations

__all__ = [
    "ADD",
    "source",
    "CLEANUP",
    "FINISH",
    "REMOVE",
    "RESYNC",
    "SUMMARY",
    "TRACK",
    "UNTRACK",
]

_PRELUDE = r"""
local P = ARGV[1]
local AGES = P .. 'ages'
local REASONS = P .. 'reasons'
local SCOPES = P .. 'scopes'
local FS = P .. 'fs'
local WORKERS = P .. 'workers'
local KINDS = P .. 'kinds'
local function rows_key(scope) return P .. 's:' .. scope end
local function level_key(n) return P .. 'l:' .. string.format('%d', n) end
local function flight_key(m) return P .. 'f:' .. m end
local function worker_key(w) return P .. 'w:' .. w end
local function hb_key(w) return P .. 'hb:' .. w end
local function member(scope, key) return #scope .. ':' .. scope .. key end
-- '<n>:<head (n bytes)><tail>' -> head, tail
local function split(s)
  local colon = string.find(s, ':', 1, true)
  local n = tonumber(string.sub(s, 1, colon - 1))
  return string.sub(s, colon + 1, colon + n), string.sub(s, colon + n + 1)
end
-- The kind of a scope, exactly as mcp_cancellation.scope.scope_kind has it.
local function kind_of(scope)
  if scope == 'global' then return 'global' end
  local prefix = string.match(scope, '^([^:]*):')
  if prefix == 'session' or prefix == 'principal' or prefix == 'ip' then return prefix end
  return 'other'
end
-- Start keeping P kinds: counted once from P scopes (a table an older version wrote).
local function ensure_kinds()
  if redis.call('HSETNX', KINDS, '_v', '1') == 0 then return end
  local scopes = redis.call('ZRANGE', SCOPES, 0, -1, 'WITHSCORES')
  local totals = {}
  for i = 1, #scopes, 2 do
    local kind = kind_of(scopes[i])
    totals[kind] = (totals[kind] or 0) + tonumber(scopes[i + 1])
  end
  for kind, n in pairs(totals) do redis.call('HSET', KINDS, kind, n) end
end
-- Rows of `scope` added (delta > 0) or removed, before P scopes is re-filed.
local function count_kind(scope, delta)
  ensure_kinds()
  redis.call('HINCRBY', KINDS, kind_of(scope), delta)
end
local function count_of(scope)
  return tonumber(redis.call('ZSCORE', SCOPES, scope) or 0)
end
-- Re-file a scope after its rows changed; old is its row count before the change.
local function relevel(scope, old)
  local rk = rows_key(scope)
  local n = redis.call('ZCARD', rk)
  if old > 0 then redis.call('ZREM', level_key(old), scope) end
  if n > 0 then
    local first = redis.call('ZRANGE', rk, 0, 0, 'WITHSCORES')
    redis.call('ZADD', level_key(n), first[2], scope)
    redis.call('ZADD', SCOPES, n, scope)
  else
    redis.call('ZREM', SCOPES, scope)
  end
end
-- Delete existing rows of one scope (the caller re-files the scope afterwards).
local function drop_rows(scope, keys)
  if #keys > 0 then count_kind(scope, -#keys) end
  local members = {}
  for i, k in ipairs(keys) do members[i] = member(scope, k) end
  for i = 1, #keys, 1000 do
    local j = math.min(i + 999, #keys)
    redis.call('ZREM', rows_key(scope), unpack(keys, i, j))
    redis.call('ZREM', AGES, unpack(members, i, j))
    redis.call('HDEL', REASONS, unpack(members, i, j))
  end
end
-- Evict the oldest `limit` scopes of those holding exactly one row, appending each
-- scope's netstring to `singles`; a handful of commands per 1000 scopes instead of a
-- dozen per scope. Returns how many were evicted.
local function drop_single_rows(limit, singles)
  local level = level_key(1)
  local victims = redis.call('ZRANGE', level, 0, limit - 1)
  local members, keys, kinds = {}, {}, {}
  if #victims > 0 then ensure_kinds() end
  for i, victim in ipairs(victims) do
    local kind = kind_of(victim)
    kinds[kind] = (kinds[kind] or 0) + 1
    keys[i] = rows_key(victim)
    members[i] = member(victim, redis.call('ZRANGE', keys[i], 0, 0)[1])
    singles[#singles + 1] = #victim .. ':' .. victim
  end
  for i = 1, #victims, 1000 do
    local j = math.min(i + 999, #victims)
    redis.call('ZREM', AGES, unpack(members, i, j))
    redis.call('HDEL', REASONS, unpack(members, i, j))
    redis.call('DEL', unpack(keys, i, j))
    redis.call('ZREM', SCOPES, unpack(victims, i, j))
  end
  if #victims > 0 then redis.call('ZREMRANGEBYRANK', level, 0, #victims - 1) end
  for kind, n in pairs(kinds) do redis.call('HINCRBY', KINDS, kind, -n) end
  return #victims
end
local function remove_row(scope, key)
  if redis.call('HEXISTS', REASONS, member(scope, key)) == 0 then return 0 end
  local count = count_of(scope)
  drop_rows(scope, {key})
  relevel(scope, count)
  return 1
end
-- Evict up to `budget` rows of a batch that still owes `remaining`, in eviction order:
-- the largest scope first (among equals the one holding the oldest row), its oldest rows
-- first, a whole scope at a time except where the batch ends. `partial` names a scope that
-- a previous call (whose budget ran out) was part-way through: it is finished first, so
-- a batch split over several calls evicts exactly what one call would have. Appends
-- (scope, count) pairs to `result` and one-row scopes to `singles`; returns what is still
-- owed, the budget left and the scope left part-way ('' for none).
local function evict(remaining, budget, partial, result, singles)
  while remaining > 0 and budget > 0 do
    local victim, size = nil, 0
    if partial ~= '' then
      size = count_of(partial)
      if size > 0 then victim = partial end
      partial = ''
    end
    if not victim then
      local top = redis.call('ZREVRANGE', SCOPES, 0, 0, 'WITHSCORES')
      if #top == 0 then break end
      size = tonumber(top[2])
      if size > 1 then
        victim = redis.call('ZRANGE', level_key(size), 0, 0)[1]
        if not victim then break end
      end
    end
    if victim then
      local take = math.min(remaining, size)
      local now = math.min(take, budget)
      drop_rows(victim, redis.call('ZRANGE', rows_key(victim), 0, now - 1))
      relevel(victim, size)
      result[#result + 1] = victim
      result[#result + 1] = now
      remaining, budget = remaining - now, budget - now
      if now < take then partial = victim end
    else
      -- Only one-row scopes are left (an address-rotation flood): they go oldest first,
      -- which is the order of P l:1, so drop the next ones together.
      local n = drop_single_rows(math.min(remaining, budget), singles)
      if n == 0 then break end
      remaining, budget = remaining - n, budget - n
    end
  end
  return remaining, budget, partial
end
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function next_age()
  local now = now_us()
  local last = tonumber(redis.call('GET', P .. 'clock') or 0)
  if now <= last then now = last + 1 end
  redis.call('SET', P .. 'clock', string.format('%.0f', now))
  return string.format('%.0f', now)
end
local function track(scope, key, owner, w)
  local m = member(scope, key)
  if redis.call('HSET', flight_key(m), owner, w) == 1 then
    redis.call('HINCRBY', FS, scope, 1)
    redis.call('SADD', worker_key(w), #m .. ':' .. m .. owner)
    redis.call('SADD', WORKERS, w)
  end
  return m
end
-- Remove one in-flight row given its member and owner; returns 1 if it existed.
local function untrack_member(m, scope, owner)
  local fk = flight_key(m)
  local w = redis.call('HGET', fk, owner)
  if not w then return 0 end
  redis.call('HDEL', fk, owner)
  if redis.call('HINCRBY', FS, scope, -1) <= 0 then redis.call('HDEL', FS, scope) end
  local wk = worker_key(w)
  redis.call('SREM', wk, #m .. ':' .. m .. owner)
  if redis.call('EXISTS', wk) == 0 then redis.call('SREM', WORKERS, w) end
  return 1
end
local function untrack(scope, key, owner)
  return untrack_member(member(scope, key), scope, owner)
end
"""

#: ARGV: prefix, scope, key, reason (encoded), require_in_flight ("1"/"0"), quota ("" for
#: none), cap ("" for none), eviction batch, this worker's id, the most rows this call may
#: evict ("" for no bound), rows of a batch an earlier call left owed ("" for none) and the
#: scope it was part-way through ("" for none), shadow quota ("1": record past the quota
#: and say so, "" or "0": refuse).
#: Returns {outcome, one-row scopes evicted, rows still owed, scope part-way, over quota
#: (1 or 0), evicted scope, count, evicted scope, count, ...}. Outcome ``evicting`` means
#: the call spent its eviction budget before the batch was done and wrote nothing else:
#: the caller calls again
#: with the owed rows and the scope, so that no single script holds Redis for long, and the
#: calls together evict exactly what one unbounded call would. The scopes evicted whole with
#: one row each (an address-rotation flood) come after the others in eviction order, packed
#: as netstrings in one string so that a batch of thousands is one reply element.
ADD = (
    _PRELUDE
    + r"""
local scope, key, renc = ARGV[2], ARGV[3], ARGV[4]
local m = member(scope, key)
local fk = flight_key(m)
local result, singles = {'recorded', '', 0, '', 0}, {}
local budget = tonumber(ARGV[10]) or math.huge
local owed, partial = tonumber(ARGV[11]) or 0, ARGV[12] or ''
local function done(outcome)
  result[1], result[2], result[3], result[4] = outcome, table.concat(singles), owed, partial
  return result
end
if owed > 0 then
  owed, budget, partial = evict(owed, budget, partial, result, singles)
  if owed > 0 then return done('evicting') end
end
if ARGV[5] == '1' and redis.call('EXISTS', fk) == 0 then return done('not_in_flight') end
if redis.call('HEXISTS', REASONS, m) == 1 then
  redis.call('HSET', REASONS, m, renc)
  result[1] = 'updated'
else
  local count = count_of(scope)
  if ARGV[6] ~= '' and count >= tonumber(ARGV[6]) then
    if ARGV[13] ~= '1' then return done('quota') end
    result[5] = 1  -- shadow mode: recorded, and reported as what enforcing would refuse
  end
  local total = redis.call('ZCARD', AGES)
  if ARGV[7] ~= '' and total >= tonumber(ARGV[7]) then
    owed, budget, partial = evict(math.min(tonumber(ARGV[8]), total), budget, '', result, singles)
    if owed > 0 then return done('evicting') end
    count = count_of(scope)
  end
  local age = next_age()
  count_kind(scope, 1)
  redis.call('ZADD', rows_key(scope), age, key)
  redis.call('ZADD', AGES, age, m)
  redis.call('HSET', REASONS, m, renc)
  relevel(scope, count)
end
result[2] = table.concat(singles)
-- Push the cancellation to every other worker that tracks the request.
local owners = redis.call('HGETALL', fk)
local by_worker = {}
local workers = {}
for i = 1, #owners, 2 do
  local w = owners[i + 1]
  if w ~= ARGV[9] then
    local msg = by_worker[w]
    if msg == nil then
      msg = {#scope .. ':' .. scope, #key .. ':' .. key, #renc .. ':' .. renc}
      by_worker[w] = msg
      workers[#workers + 1] = w
    end
    msg[#msg + 1] = #owners[i] .. ':' .. owners[i]
  end
end
for _, w in ipairs(workers) do
  redis.call('PUBLISH', P .. 'c:' .. w, table.concat(by_worker[w]))
end
return result
"""
)

#: ARGV: prefix, scope, key, owner, worker, heartbeat TTL (ms).
#: Returns {encoded reason of an existing cancellation row or nil, 1 if the worker's
#: heartbeat was missing (its other rows may have been swept: resync) else 0}.
TRACK = (
    _PRELUDE
    + r"""
local m = track(ARGV[2], ARGV[3], ARGV[4], ARGV[5])
local created = redis.call('SET', hb_key(ARGV[5]), '1', 'PX', ARGV[6], 'NX')
return {redis.call('HGET', REASONS, m), created and 1 or 0}
"""
)

#: ARGV: prefix, scope, key, owner. Returns 1 if the row existed.
UNTRACK = (
    _PRELUDE
    + r"""
return untrack(ARGV[2], ARGV[3], ARGV[4])
"""
)

#: ARGV: prefix, scope, key. Returns 1 if the row existed (an absent row writes nothing).
REMOVE = (
    _PRELUDE
    + r"""
return remove_row(ARGV[2], ARGV[3])
"""
)

#: ARGV: prefix, scope, key, owner: untrack the owner, then remove the cancellation row.
FINISH = (
    _PRELUDE
    + r"""
untrack(ARGV[2], ARGV[3], ARGV[4])
return remove_row(ARGV[2], ARGV[3])
"""
)

#: ARGV: prefix, k. Returns {P kinds as field/value pairs, P fs likewise, the k largest
#: scopes and their counts in eviction order (largest first, equal sizes oldest row first)}:
#: O(k log n), walking at most k levels down from the largest size.
SUMMARY = (
    _PRELUDE
    + r"""
local k = tonumber(ARGV[2])
ensure_kinds()
local largest = {}
local top = redis.call('ZREVRANGE', SCOPES, 0, 0, 'WITHSCORES')
local size = top[2] and tonumber(top[2])
local found = 0
while size and found < k do
  for _, scope in ipairs(redis.call('ZRANGE', level_key(size), 0, k - found - 1)) do
    largest[#largest + 1] = scope
    largest[#largest + 1] = size
    found = found + 1
  end
  if found >= k then break end
  local below = redis.call('ZREVRANGEBYSCORE', SCOPES, '(' .. size, '-inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  size = below[2] and tonumber(below[2])
end
local near = 0
if ARGV[3] and ARGV[3] ~= '' then near = redis.call('ZCOUNT', SCOPES, ARGV[3], '+inf') end
return {redis.call('HGETALL', KINDS), redis.call('HGETALL', FS), largest, near}
"""
)

#: ARGV: prefix, worker, heartbeat TTL (ms), n, then n (scope, key, owner) triples to
#: (re)track, then (scope, key, owner) triples to untrack.
#: Refreshes the heartbeat; returns the encoded reason (or nil) of each tracked triple.
RESYNC = (
    _PRELUDE
    + r"""
local w = ARGV[2]
redis.call('SET', hb_key(w), '1', 'PX', ARGV[3])
local n = tonumber(ARGV[4])
local out = {}
local i = 5
for t = 1, n do
  local m = track(ARGV[i], ARGV[i + 1], ARGV[i + 2], w)
  out[t] = redis.call('HGET', REASONS, m)
  i = i + 3
end
while i <= #ARGV do
  untrack(ARGV[i], ARGV[i + 1], ARGV[i + 2])
  i = i + 3
end
return out
"""
)

#: ARGV: prefix, this worker, TTL in microseconds ("" for none), batch limit, then
#: (scope, key, owner) triples of dead owners to untrack.
#: Returns {removed, in_flight_removed, more} (more = 1 if the TTL sweep hit the limit).
CLEANUP = (
    _PRELUDE
    + r"""
local removed, in_flight_removed, more = 0, 0, 0
local i = 5
while i <= #ARGV do
  in_flight_removed = in_flight_removed + untrack(ARGV[i], ARGV[i + 1], ARGV[i + 2])
  i = i + 3
end
-- In-flight rows of other workers whose heartbeat expired (killed, or cut off too long).
for _, other in ipairs(redis.call('SMEMBERS', WORKERS)) do
  if other ~= ARGV[2] and redis.call('EXISTS', hb_key(other)) == 0 then
    for _, entry in ipairs(redis.call('SMEMBERS', worker_key(other))) do
      local m, owner = split(entry)
      local scope = split(m)
      if redis.call('HDEL', flight_key(m), owner) == 1 then
        in_flight_removed = in_flight_removed + 1
        if redis.call('HINCRBY', FS, scope, -1) <= 0 then redis.call('HDEL', FS, scope) end
      end
    end
    redis.call('DEL', worker_key(other))
    redis.call('SREM', WORKERS, other)
  end
end
if ARGV[3] ~= '' then
  local deadline = string.format('%.0f', now_us() - tonumber(ARGV[3]))
  local limit = tonumber(ARGV[4])
  local expired = redis.call('ZRANGEBYSCORE', AGES, '-inf', '(' .. deadline, 'LIMIT', 0, limit)
  if #expired >= limit then more = 1 end
  local by_scope, order = {}, {}
  for _, m in ipairs(expired) do
    local scope, key = split(m)
    local keys = by_scope[scope]
    if keys == nil then
      keys = {}
      by_scope[scope] = keys
      order[#order + 1] = scope
    end
    keys[#keys + 1] = key
  end
  for _, scope in ipairs(order) do
    local count = count_of(scope)
    drop_rows(scope, by_scope[scope])
    relevel(scope, count)
    removed = removed + #by_scope[scope]
  end
end
return {removed, in_flight_removed, more}
"""
)


def source(name: str, *, sharded: bool = False) -> str:
    """The text of script *name*; with *sharded* (a cluster), pushes use ``SPUBLISH``, so
    a message stays within the table's shard (the channel shares the keys' hash tag)."""
    text: str = globals()[name]
    return text.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'") if sharded else text
