-- The rows and the scope index (docs/architecture.md, "The scope index"): key names, the
-- row codec, the index's upkeep, eviction and the table's clock. Prepended after base.lua
-- to every row script (see _scripts.source); REMOVE and SUMMARY need nothing more.
local AGES = P .. 'ages'
local REASONS = P .. 'reasons'
local SCOPES = P .. 'scopes'
local FS = P .. 'fs'  -- owners in flight per scope (the scrape reads it; owners.lua keeps it)
local KINDS = P .. 'kinds'
local function rows_key(scope) return P .. 's:' .. scope end
local function level_key(n) return P .. 'l:' .. string.format('%d', n) end
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
-- `command key item...` over `items`, 1000 items a call (`key` false: the items are the
-- keys, as for DEL). Pairs (ZADD's score, member) stay whole: 1000 is even.
local function bulk(command, key, items)
  for i = 1, #items, 1000 do
    local j = math.min(i + 999, #items)
    if key then
      redis.call(command, key, unpack(items, i, j))
    else
      redis.call(command, unpack(items, i, j))
    end
  end
end
-- Delete existing rows of one scope (the caller re-files the scope afterwards).
local function drop_rows(scope, keys)
  if #keys > 0 then count_kind(scope, -#keys) end
  local members = {}
  for i, k in ipairs(keys) do members[i] = member(scope, k) end
  bulk('ZREM', rows_key(scope), keys)
  bulk('ZREM', AGES, members)
  bulk('HDEL', REASONS, members)
end
-- A scope's evicted rows, as `evicted` lists them: netstrings of the scope and the count.
local function evicted_count(n)
  return netstring(string.format('%d', n))
end
-- Forget whole scopes: their row keys `keys` and their counts in P scopes (the caller
-- takes them out of their levels, their rows out of P ages and P reasons).
local function forget_scopes(scopes, keys)
  bulk('DEL', false, keys)
  bulk('ZREM', SCOPES, scopes)
end
-- Rows removed, by scope kind (`kinds`: kind -> rows), off P kinds.
local function uncount_kinds(kinds)
  for kind, count in pairs(kinds) do redis.call('HINCRBY', KINDS, kind, -count) end
end
-- Delete whole scopes at once: `victims` (all of one size, first in P l:<size>), the
-- `members` of their rows and their row keys `keys`; `kinds` holds rows by scope kind.
-- One bulk command per 1000 items instead of a dozen commands per scope. (One-row
-- victims' rows have left P ages already, by rank: see drop_single_rows.)
local function drop_scopes(size, victims, members, keys, kinds)
  ensure_kinds()
  bulk('HDEL', REASONS, members)
  if size > 1 then bulk('ZREM', AGES, members) end
  forget_scopes(victims, keys)
  redis.call('ZREMRANGEBYRANK', level_key(size), 0, #victims - 1)
  uncount_kinds(kinds)
end
-- Evict the oldest `limit` scopes when every scope holds exactly one row (an
-- address-rotation flood), appending each scope's netstring to `singles`. Then P ages
-- holds exactly those rows, in the order of P l:1 (both by the row's age, and ages are
-- unique), so its first members are the victims' rows themselves: one range read and
-- range deletes, with no command per victim. Returns how many were evicted.
local function drop_single_rows(limit, singles)
  local members = redis.call('ZRANGE', AGES, 0, limit - 1)
  local n = #members
  if n == 0 then return 0 end
  local victims, keys, kinds = {}, {}, {}
  local find, sub, base = string.find, string.sub, #singles
  for i = 1, n do
    local m = members[i]
    local colon = find(m, ':', 1, true)
    local victim = sub(m, colon + 1, colon + tonumber(sub(m, 1, colon - 1)))
    victims[i] = victim
    keys[i] = rows_key(victim)
    local kind = kind_of(victim)
    kinds[kind] = (kinds[kind] or 0) + 1
    singles[base + i] = sub(m, 1, colon) .. victim
  end
  redis.call('ZREMRANGEBYRANK', AGES, 0, n - 1)
  drop_scopes(1, victims, members, keys, kinds)
  return n
end
-- Evict whole scopes of `size` rows (the largest size there is), oldest first, as many
-- as `limit` rows allow: one read of each victim's rows, the rest in bulk (many small
-- scopes, such as a flood of a few cancellations per rotated address, would otherwise
-- cost a dozen commands per scope). Appends each victim to `evicted` (see evicted_count);
-- returns the rows evicted.
local function drop_level(size, limit, evicted)
  local victims = redis.call('ZRANGE', level_key(size), 0, math.floor(limit / size) - 1)
  if #victims == 0 then return 0 end
  local members, keys, kinds = {}, {}, {}
  for i, victim in ipairs(victims) do
    keys[i] = rows_key(victim)
    local head = netstring(victim)
    for _, key in ipairs(redis.call('ZRANGE', keys[i], 0, -1)) do
      members[#members + 1] = head .. key
    end
    local kind = kind_of(victim)
    kinds[kind] = (kinds[kind] or 0) + size
    evicted[#evicted + 1] = head .. evicted_count(size)
  end
  drop_scopes(size, victims, members, keys, kinds)
  return #victims * size
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
-- each (scope, count) to `evicted` as a pair of netstrings, except the one-row scopes
-- evicted whole, which go to `singles` as one netstring each (they always come last);
-- returns what is still owed, the budget left and the scope left part-way ('' for none).
local function evict(remaining, budget, partial, evicted, singles)
  while remaining > 0 and budget > 0 do
    local victim, size = nil, 0
    if partial ~= '' then
      size = count_of(partial)
      if size > 0 then victim = partial end
      partial = ''
    end
    local whole = 0  -- rows evicted as whole scopes in bulk this round (none: one scope)
    if not victim then
      local top = redis.call('ZREVRANGE', SCOPES, 0, 0, 'WITHSCORES')
      if #top == 0 then break end
      size = tonumber(top[2])
      local limit = math.min(remaining, budget)
      if size == 1 then
        -- Only one-row scopes are left (an address-rotation flood).
        whole = drop_single_rows(limit, singles)
        if whole == 0 then break end
      elseif limit >= size then
        whole = drop_level(size, limit, evicted)
        if whole == 0 then break end
      else  -- the batch ends inside the next scope
        victim = redis.call('ZRANGE', level_key(size), 0, 0)[1]
        if not victim then break end
      end
    end
    if victim then
      local take = math.min(remaining, size)
      local now = math.min(take, budget)
      drop_rows(victim, redis.call('ZRANGE', rows_key(victim), 0, now - 1))
      relevel(victim, size)
      evicted[#evicted + 1] = netstring(victim) .. evicted_count(now)
      remaining, budget = remaining - now, budget - now
      if now < take then partial = victim end
    else
      remaining, budget = remaining - whole, budget - whole
    end
  end
  return remaining, budget, partial
end
-- The table's clock: the server's, but never behind the last age it gave (a failover to
-- a node whose clock is behind, or a test that moves `P clock` on to age the rows).
local function last_age() return tonumber(redis.call('GET', P .. 'clock') or 0) end
local function table_now() return math.max(now_us(), last_age()) end
local function next_age()
  local now = now_us()
  local last = last_age()
  if now <= last then now = last + 1 end
  redis.call('SET', P .. 'clock', string.format('%.0f', now))
  return string.format('%.0f', now)
end
