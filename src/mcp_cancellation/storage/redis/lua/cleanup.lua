-- CLEANUP: the janitor's sweep. docs/architecture.md, "The Redis table".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.CleanupCall.argv):
--   1 prefix   P
--   2 worker   the sweeping worker's id (never swept by itself)
--   3 ttl_us   rows older than this many microseconds expire ('' for none)
--   4 batch    the most expired rows one call removes
--   5 beat_ms  the caller's heartbeat TTL (for the table's clock: liveness.lua)
-- Reply (decoded by _contracts.CleanupReply): {rows removed, owners removed (of workers
-- whose heartbeat lapsed), 1 if the TTL sweep hit the batch limit (call again) else 0}.
local removed, in_flight_removed, more = 0, 0, 0
local beat_ms = tonumber(ARGV[5])
local t = table_ms(beat_ms)
-- In-flight rows of other workers whose heartbeat expired (killed, or cut off too long),
-- and the cancellation rows bound to them alone.
for _, other in ipairs(redis.call('SMEMBERS', WORKERS)) do
  if other ~= ARGV[2] and not alive(other, t) then
    for _, entry in ipairs(redis.call('SMEMBERS', owners_key(other))) do
      local m, owner = split(entry)
      local scope, key = split(m)
      in_flight_removed = in_flight_removed + untrack_member(m, scope, owner, other)
      remove_orphan_row(scope, key)
    end
    redis.call('DEL', owners_key(other))
    redis.call('SREM', WORKERS, other)
  end
end
if ARGV[3] ~= '' then
  -- The expired rows are the oldest of P ages (a prefix by rank): they go in one range
  -- delete. Scopes all of whose rows expired (a flood's one-row scopes, typically) are
  -- deleted in bulk; the others lose their oldest rows and are re-filed, with the level
  -- and count updates of all of them grouped into bulk commands.
  local deadline = string.format('%.0f', table_now() - tonumber(ARGV[3]))
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
  local cut = nil  -- the age of the newest expired row
  if #expired > 0 then
    ensure_kinds()
    cut = redis.call('ZSCORE', AGES, expired[#expired])
    redis.call('ZREMRANGEBYRANK', AGES, 0, #expired - 1)
    bulk('HDEL', REASONS, expired)
  end
  -- Scopes leave their level (by old size: `leaving`); those that keep rows join the
  -- level of their new size (`joining`, with the age of their new oldest row) and are
  -- re-counted in P scopes (`recount`); the others are deleted (`gone`).
  local kinds, gone, gone_keys, leaving, joining, recount = {}, {}, {}, {}, {}, {}
  local function add_to(groups, size, ...)
    local group = groups[size]
    if group == nil then
      group = {}
      groups[size] = group
    end
    for _, value in ipairs({...}) do group[#group + 1] = value end
  end
  for _, scope in ipairs(order) do
    local keys = by_scope[scope]
    local count = count_of(scope)
    local kind = kind_of(scope)
    kinds[kind] = (kinds[kind] or 0) + #keys
    -- (One-row scopes leave P l:1 by one range delete, below.)
    if count > 1 then add_to(leaving, count, scope) end
    local rk = rows_key(scope)
    if #keys >= count then
      gone[#gone + 1] = scope
      gone_keys[#gone_keys + 1] = rk
    else
      bulk('ZREM', rk, keys)
      local first = redis.call('ZRANGE', rk, 0, 0, 'WITHSCORES')
      add_to(joining, count - #keys, first[2], scope)
      recount[#recount + 1] = count - #keys
      recount[#recount + 1] = scope
    end
  end
  forget_scopes(gone, gone_keys)
  -- One-row scopes that expired are the front of P l:1, up to the newest expired row
  -- (before any scope below joins P l:1: those hold only rows newer than that).
  if cut then redis.call('ZREMRANGEBYSCORE', level_key(1), '-inf', cut) end
  for size, level in pairs(leaving) do bulk('ZREM', level_key(size), level) end
  for size, level in pairs(joining) do bulk('ZADD', level_key(size), level) end
  -- (One-row scopes are kept in P scopes too, count 1, like every scope.)
  bulk('ZADD', SCOPES, recount)
  uncount_kinds(kinds)
  removed = #expired
end
return {removed, in_flight_removed, more}
