-- Shared by the row scripts (not the task scripts, which need none of it): key names,
-- the row codec and the row operations. Prepended after base.lua (see _scripts.source).
local AGES = P .. 'ages'
local REASONS = P .. 'reasons'
local SCOPES = P .. 'scopes'
local FS = P .. 'fs'
local WORKERS = P .. 'workers'
local KINDS = P .. 'kinds'
local EPOCH = P .. 'epoch'
local RECOVERING = P .. 'recovering'
local SEQ = P .. 'seq'  -- the table's sequence counter (see track)
local function rows_key(scope) return P .. 's:' .. scope end
local function level_key(n) return P .. 'l:' .. string.format('%d', n) end
local function flight_key(m) return P .. 'f:' .. m end
local function worker_key(w) return P .. 'w:' .. w end
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
-- Mark the table recovering for grace_ms, as a worker's call says (`arg`): '' nothing,
-- '*' the whole table (P recovering), else netstrings of the scopes of the worker's
-- tracks still on their way (P recovering:<scope> each: its call only timed out).
local function mark_recovering(arg, grace_ms)
  if arg == '' then return end
  if arg == '*' then
    redis.call('SET', RECOVERING, '1', 'PX', grace_ms)
    return
  end
  local rest = arg
  while rest ~= '' do
    local scope
    scope, rest = split(rest)
    redis.call('SET', RECOVERING .. ':' .. scope, '1', 'PX', grace_ms)
  end
end
-- Whether "not in flight" cannot be told for `scope`: the table, or the scope, recovers.
local function recovering(scope)
  return redis.call('EXISTS', RECOVERING, RECOVERING .. ':' .. scope) > 0
end
-- The table's epoch: a value written once, when the table is first used, and gone with a
-- flush, a restart without persistence or a failover to an empty replica. `known` is the
-- epoch the caller last synchronised with ('' if none). Returns the epoch and 1 when the
-- caller knew another one: the table it wrote to is lost, so `P recovering` marks the next
-- `grace_ms` milliseconds (cancellations of ids not in flight are refused: a worker may
-- not have re-tracked its requests yet) and every worker is told to resynchronise.
-- Only a worker's SYNC creates the table (`layout`: '<partition>/<partitions>', kept in
-- `P layout` for the operator tools); a cancellation alone (ADD) never does.
local function check_epoch(known, grace_ms, layout)
  local e = redis.call('GET', EPOCH)
  if not e and layout then
    local t = redis.call('TIME')
    e = t[1] .. '.' .. t[2]
    redis.call('SET', EPOCH, e)
    redis.call('SET', P .. 'layout', layout)
  end
  e = e or ''
  if known ~= '' and known ~= e then
    redis.call('SET', RECOVERING, '1', 'PX', grace_ms)
    redis.call('PUBLISH', P .. 'resync', e)
    return e, 1
  end
  return e, 0
end
-- A cancellation of (scope, key) *seeks* its calls that run untracked (younger than their
-- worker's track delay): one message on P seek, to every worker, 's' + netstrings of the
-- scope and key (track them now), or 'p' for a pending row (track them now, and track a
-- call of the request at its start until one claims the row). Read by _push.Push.
local function seek(kind, scope, key)
  redis.call('PUBLISH', P .. 'seek', kind .. netstring(scope) .. netstring(key))
end
-- A request's owners in flight (docs/architecture.md, "The Redis table"): P f:<m> holds
-- each owner's track, '<sequence>\t<started ms>\t<worker>\t<tool>' (what the operator
-- view shows of it too); P fw:<m> holds its mark ('!' -> '<sequence>:<reason>': every
-- owner tracked at or before that sequence of the table's counter P seq is cancelled, a
-- later one is not) and each worker's count of owners. So a cancellation
-- writes one mark and one message per worker, however many owners it reaches. Both keys
-- go with the request's last owner.
local function workers_key(m) return P .. 'fw:' .. m end
-- The reason the mark of P fw:<m> `wk` ('<sequence>:<time µs>:<reason>') gives an owner
-- of `sequence` that started at `started` (µs, the table's clock), or nil: an owner
-- tracked at or before the mark's sequence, or (a call tracked late: see track) one
-- that started before the mark was set.
local function marked(wk, sequence, started)
  local mark = redis.call('HGET', wk, '!')
  if not mark then return nil end
  local colon = string.find(mark, ':', 1, true)
  local second = string.find(mark, ':', colon + 1, true)
  if tonumber(string.sub(mark, 1, colon - 1)) >= sequence
    or started <= tonumber(string.sub(mark, colon + 1, second - 1)) then
    return string.sub(mark, second + 1)
  end
  return nil
end
local function set_mark(wk, sequence, reason)
  redis.call('HSET', wk, '!', string.format('%d:%.0f:', sequence, now_us()) .. reason)
end
-- An owner's sequence, from its track.
local function sequence_of(track)
  return tonumber(string.sub(track, 1, string.find(track, '\t', 1, true) - 1))
end
-- A *pending* row ('*' before the encoded reason) was recorded when nothing was in
-- flight (a library's cancel() of a request that has not started): the next owner
-- tracked claims it, and only it.
-- A *waiting cancellation*: a client's cancellation that found its request not in
-- flight waits, for the registry's track_wait, as one field of P wait:<m> (its waiter ->
-- encoded reason; '!' before it once claimed) and one member of P waiting:<scope> (the
-- scope's count against its quota, scored by when it lapses). Every owner tracked while
-- it waits claims it; the waiter withdraws it before the client is answered (WITHDRAW),
-- so nothing of it outlives the answer. No clock is compared but Redis's own, and that
-- only to purge a waiter that died.
local function wait_key(m) return P .. 'wait:' .. m end
local function waiting_key(scope) return P .. 'waiting:' .. scope end
-- The waiting cancellations of `scope` (the lapsed ones purged first).
local function waiting_of(scope)
  local key = waiting_key(scope)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now_us()))
  return redis.call('ZCARD', key)
end
-- Claim the cancellations waiting for member m, if any: marks them claimed and returns
-- the first one's reason, or nil. (One waits only if nothing of m was in flight when it
-- came, and every owner tracked since has claimed it: the claimer's mark, at its own
-- sequence, cancels exactly those owners.)
local function claim_waiting(m)
  local waits = redis.call('HGETALL', wait_key(m))
  if #waits == 0 then return nil end
  local v = waits[2]
  if string.byte(v, 1) == 33 then v = string.sub(v, 2) end
  local claimed = {}
  for i = 1, #waits, 2 do
    local reason = waits[i + 1]
    if string.byte(reason, 1) ~= 33 then
      claimed[#claimed + 1] = waits[i]
      claimed[#claimed + 1] = '!' .. reason
    end
  end
  bulk('HSET', wait_key(m), claimed)
  return v
end
-- Track (scope, key) for owner of worker w, started age µs before the track was sent,
-- calling tool. A new owner gets the request's next sequence and claims a pending row and
-- the waiting cancellations; an owner tracked again (a resync) keeps its sequence. Either
-- learns whether the mark reaches it: a worker tracks a call only once it has run for its
-- track delay, so a mark set after the call started (by its start, `age` before now)
-- reaches it although its sequence is later. Returns its sequence and the reason of the
-- cancellation that reaches it, or nil.
local function track(scope, key, owner, w, age, tool)
  local m = member(scope, key)
  local fk, wk = flight_key(m), workers_key(m)
  -- Sequences come from one counter of the table (P seq): they never repeat within its
  -- epoch, so a mark, however late it is applied, never matches a later owner's.
  local sequence = redis.call('INCR', SEQ)
  local started_us = now_us() - (age or 0)
  local started = math.floor(started_us / 1000)
  local value = string.format('%d\t%.0f\t', sequence, started) .. w .. '\t' .. (tool or '')
  if redis.call('HSETNX', fk, owner, value) == 0 then
    sequence = sequence_of(redis.call('HGET', fk, owner))  -- (tracked again: a resync)
    return sequence, marked(wk, sequence, started_us)
  end
  redis.call('HINCRBY', wk, w, 1)
  redis.call('HINCRBY', FS, scope, 1)
  redis.call('SADD', worker_key(w), netstring(m) .. owner)
  local v = redis.call('HGET', REASONS, m)
  if v and string.byte(v, 1) == 42 then  -- '*': pending, claimed by this owner
    v = string.sub(v, 2)
    redis.call('HSET', REASONS, m, v)
  else
    v = nil
  end
  local waited = claim_waiting(m)  -- (claimed even when a pending row was: its
  v = v or waited                   -- caller then learns its cancellation stopped one)
  if v then
    set_mark(wk, sequence, v)
  else
    v = marked(wk, sequence, started_us)  -- a mark set while this call ran untracked
  end
  return sequence, v
end
-- Remove the in-flight row of owner (of worker w) given its member; returns 1 if it
-- existed.
local function untrack_member(m, scope, owner, w)
  local fk = flight_key(m)
  if redis.call('HDEL', fk, owner) == 0 then return 0 end
  local wk = workers_key(m)
  if redis.call('EXISTS', fk) == 0 then
    redis.call('DEL', wk)  -- the last owner: its sequence and mark go too
  elseif redis.call('HINCRBY', wk, w, -1) <= 0 then
    redis.call('HDEL', wk, w)
  end
  if redis.call('HINCRBY', FS, scope, -1) <= 0 then redis.call('HDEL', FS, scope) end
  redis.call('SREM', worker_key(w), netstring(m) .. owner)
  return 1
end
local function untrack(scope, key, owner, w)
  return untrack_member(member(scope, key), scope, owner, w)
end
-- Remove the cancellation row of (scope, key) if it is bound and no owner is left in
-- flight (a dead owner's, or one a lost write left behind); returns 1 if removed.
local function release_row(scope, key)
  local m = member(scope, key)
  if redis.call('EXISTS', flight_key(m)) == 1 then return 0 end
  local v = redis.call('HGET', REASONS, m)
  if not v or string.byte(v, 1) == 42 then return 0 end
  return remove_row(scope, key)
end
