-- Owners in flight (docs/architecture.md, "The Redis table"): the epoch and recovery, the
-- seeks, each request's owners, its mark and its waiting cancellations, the track and its
-- claims. Prepended after rows.lua to the scripts that track, release or cancel (ADD,
-- WITHDRAW, SYNC, CLEANUP).
local WORKERS = P .. 'workers'
local EPOCH = P .. 'epoch'
local RECOVERING = P .. 'recovering'
local SEQ = P .. 'seq'  -- the table's sequence counter (see track)
local function flight_key(m) return P .. 'f:' .. m end
local function owners_key(w) return P .. 'w:' .. w end
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
-- view shows of it too); P fw:<m> holds its mark ('!' -> '<sequence>:<time µs>:<reason>':
-- every owner tracked at or before that sequence of the table's counter P seq is
-- cancelled, a later one is not, see marked) and each worker's count of owners. So a cancellation
-- writes one mark and one message per worker, however many owners it reaches. Both keys
-- go with the request's last owner.
local function marks_key(m) return P .. 'fw:' .. m end
-- The reason the mark of P fw:<m> `wk` ('<sequence>:<time µs>:<reason>') gives an owner
-- of `sequence` that started at `started` (µs, the table's clock), or nil: an owner
-- tracked at or before the mark's sequence, or (a call tracked late: see track) one
-- that started before the mark was set.
local function marked(wk, sequence, started)
  local mark = redis.call('HGET', wk, '!')
  if not mark then return nil end
  local colon = string.find(mark, ':', 1, true)
  local reached = tonumber(string.sub(mark, 1, colon - 1)) >= sequence
  local second = string.find(mark, ':', colon + 1, true)
  if reached or started <= tonumber(string.sub(mark, colon + 1, second - 1)) then
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
-- A *lapsed* cancellation: a waiting cancellation that no track claimed before its
-- waiter withdrew it, and whose client was answered 202 all the same. A worker's loop
-- may have been blocked meanwhile (a call of it young and untracked), so it is kept, for
-- the lapse given to WITHDRAW (the rows' TTL), as P lm:<m> ('<time µs>:<reason>'): a call
-- tracked later that started before that time is cancelled by it, and no call that
-- started after. P lapses:<scope> (key -> time) bounds each scope's count.
local function lapsed_key(m) return P .. 'lm:' .. m end
local function lapses_key(scope) return P .. 'lapses:' .. scope end
-- Claim the cancellations waiting for member m, if any: marks them claimed and returns
-- the first one's reason, or nil. (One waits only if nothing of m was in flight when it
-- came, and every owner tracked since has claimed it: the claimer's mark, at its own
-- sequence, cancels exactly those owners.)
local function claim_waiting(m)
  local waits = redis.call('HGETALL', wait_key(m))
  if #waits == 0 then return nil end
  local v = waits[2]
  if string.byte(v, 1) == BANG then v = string.sub(v, 2) end
  local claimed = {}
  for i = 1, #waits, 2 do
    local reason = waits[i + 1]
    if string.byte(reason, 1) ~= BANG then
      claimed[#claimed + 1] = waits[i]
      claimed[#claimed + 1] = '!' .. reason
    end
  end
  bulk('HSET', wait_key(m), claimed)
  return v
end
-- The reason of m's lapsed cancellation if a call that started at `started_us` started
-- before it lapsed, else nil. It sets no mark: each owner tracked later meets it by its
-- own start (a mark's sequence would reach an owner tracked before, that started after).
local function lapsed(m, started_us)
  local v = redis.call('GET', lapsed_key(m))
  if not v then return nil end
  local colon = string.find(v, ':', 1, true)
  if started_us <= tonumber(string.sub(v, 1, colon - 1)) then
    return string.sub(v, colon + 1)
  end
  return nil
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
  local fk, wk = flight_key(m), marks_key(m)
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
  redis.call('SADD', owners_key(w), netstring(m) .. owner)
  local v = redis.call('HGET', REASONS, m)
  if v and string.byte(v, 1) == STAR then  -- pending: claimed by this owner
    v = string.sub(v, 2)
    redis.call('HSET', REASONS, m, v)
  else
    v = nil
  end
  local waited = claim_waiting(m)  -- (claimed even when a pending row was: its
  v = v or waited                   -- caller then learns its cancellation stopped one)
  if v then
    set_mark(wk, sequence, v)
  else  -- a mark set while this call ran untracked, or a lapsed cancellation
    v = marked(wk, sequence, started_us) or lapsed(m, started_us)
  end
  return sequence, v
end
-- Remove the in-flight row of owner (of worker w) given its member; returns 1 if it
-- existed.
local function untrack_member(m, scope, owner, w)
  local fk = flight_key(m)
  if redis.call('HDEL', fk, owner) == 0 then return 0 end
  local wk = marks_key(m)
  if redis.call('EXISTS', fk) == 0 then
    redis.call('DEL', wk)  -- the last owner: its sequence and mark go too
  elseif redis.call('HINCRBY', wk, w, -1) <= 0 then
    redis.call('HDEL', wk, w)
  end
  if redis.call('HINCRBY', FS, scope, -1) <= 0 then redis.call('HDEL', FS, scope) end
  redis.call('SREM', owners_key(w), netstring(m) .. owner)
  return 1
end
local function untrack(scope, key, owner, w)
  return untrack_member(member(scope, key), scope, owner, w)
end
-- Remove the cancellation row of (scope, key) if it is bound and no owner is left in
-- flight (a dead owner's, or one a lost write left behind); returns 1 if removed.
local function remove_orphan_row(scope, key)
  local m = member(scope, key)
  if redis.call('EXISTS', flight_key(m)) == 1 then return 0 end
  local v = redis.call('HGET', REASONS, m)
  if not v or string.byte(v, 1) == STAR then return 0 end
  return remove_row(scope, key)
end
