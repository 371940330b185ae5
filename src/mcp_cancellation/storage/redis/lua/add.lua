-- ADD: record a cancellation of (scope, key). docs/architecture.md, "The Redis table".
-- KEYS[1]: P scopes (routing only; every key is built from P, the one hash tag).
-- ARGV (built by _contracts.AddCall.argv, in this order):
--   1 prefix       P
--   2 scope        the caller's scope
--   3 key          the request id
--   4 reason       the encoded reason
--   5 in_flight    '1': only for a request in flight (else it waits: see below)
--   6 quota        the scope's quota ('' for none)
--   7 cap          the table's cap ('' for none)
--   8 batch        rows one eviction evicts
--   9 worker       this worker's id (its own tokens are flipped by the caller)
--  10 budget       the most rows this call may evict ('' for no bound)
--  11 owed         rows of a batch an earlier call left owed ('' for none)
--  12 partial      the scope that call was part-way through ('' for none)
--  13 shadow       '1': record past the quota and say so; else refuse
--  14 epoch        the table's epoch as this worker knows it ('' for none)
--  15 grace_ms     how long a lost table refuses "not in flight"
--  16 recovering   what this worker marks recovering: '' nothing, '*' the table, else
--                  netstrings of scopes (see mark_recovering)
--  17 origin       '@operator' for an operator's cancellation, else '@' (pushed along)
--  18 waiter       a name for this call, unique (the waiting cancellation's field)
--  19 wait_ms      how long the waiting cancellation may live if its waiter dies
-- Reply (decoded by _contracts.AddReply): {outcome, one-row scopes evicted, rows still
-- owed, scope part-way, over quota (1/0), the other evictions, epoch lost (1/0)}.
-- Outcomes: recorded / updated (a row, bound to the owners in flight, or pending when
-- in_flight is '0' and none is); waiting (in_flight '1' and none is: a waiting
-- cancellation was written, which the caller withdraws with WITHDRAW after its wait);
-- quota (refused); recovering (the table was lost or Redis just failed: "not in flight"
-- cannot be told; nothing written); evicting (the eviction budget ran out before the
-- batch was done and nothing else was written: call again with owed and partial; the
-- calls together evict exactly what one unbounded call would). Evictions are packed as
-- netstrings: (scope, count) pairs in eviction order, then the scopes evicted whole with
-- one row each (an address-rotation flood), as scopes alone.
-- A bound row is pushed: one message on P c:<worker> to each other worker with owners of
-- the request, netstrings (scope, key, reason, origin, the mark's sequence), read by
-- _push.Push.deliver.
local scope, key, renc = ARGV[2], ARGV[3], ARGV[4]
local quota = tonumber(ARGV[6])
local m = member(scope, key)
local fk = flight_key(m)
local result, evicted, singles = {'recorded', '', 0, '', 0, '', 0}, {}, {}
local budget = tonumber(ARGV[10]) or math.huge
local owed, partial = tonumber(ARGV[11]) or 0, ARGV[12] or ''
local function done(outcome)
  result[1], result[2], result[3], result[4] = outcome, table.concat(singles), owed, partial
  result[6] = table.concat(evicted)
  return result
end
-- (A worker whose epoch is old still records a cancellation of a request in flight; it
-- is told to resynchronise by the last reply element.)
local _, lost = check_epoch(ARGV[14], ARGV[15])
result[7] = lost
mark_recovering(ARGV[16], ARGV[15])
if owed > 0 then
  owed, budget, partial = evict(owed, budget, partial, evicted, singles)
  if owed > 0 then return done('evicting') end
end
local in_flight = redis.call('EXISTS', fk) == 1
if ARGV[5] == '1' and not in_flight then
  if recovering(scope) then return done('recovering') end
  -- Its track may still be on its way: wait for it (the quota counts what waits).
  local waiting = waiting_of(scope)
  if quota and count_of(scope) + waiting >= quota then
    if ARGV[13] ~= '1' then return done('quota') end
    result[5] = 1
  end
  local waits = wait_key(m)
  redis.call('HSET', waits, ARGV[18], renc)
  redis.call('PEXPIRE', waits, ARGV[19])
  local lapse = now_us() + 1000 * tonumber(ARGV[19])
  redis.call('ZADD', waiting_key(scope), string.format('%.0f', lapse), netstring(key) .. ARGV[18])
  redis.call('PEXPIRE', waiting_key(scope), ARGV[19])
  seek('s', scope, key)
  return done('waiting')
end
local stored = in_flight and renc or ('*' .. renc)
if redis.call('HEXISTS', REASONS, m) == 1 then
  redis.call('HSET', REASONS, m, stored)
  result[1] = 'updated'
else
  local count = count_of(scope)
  if quota and count + waiting_of(scope) >= quota then
    if ARGV[13] ~= '1' then return done('quota') end
    result[5] = 1  -- shadow mode: recorded, and reported as what enforcing would refuse
  end
  local total = redis.call('ZCARD', AGES)
  if ARGV[7] ~= '' and total >= tonumber(ARGV[7]) then
    owed, budget, partial = evict(math.min(tonumber(ARGV[8]), total), budget, '', evicted, singles)
    if owed > 0 then return done('evicting') end
    count = count_of(scope)
  end
  local age = next_age()
  count_kind(scope, 1)
  redis.call('ZADD', rows_key(scope), age, key)
  redis.call('ZADD', AGES, age, m)
  redis.call('HSET', REASONS, m, stored)
  relevel(scope, count)
end
result[2], result[6] = table.concat(singles), table.concat(evicted)
if not in_flight then
  seek('p', scope, key)
  return result
end
seek('s', scope, key)
-- Bind it to the owners in flight: one mark at the table's last sequence (every owner
-- tracked so far has one at or before it, every later one a greater one), and one
-- message per other worker that has owners of it (their listeners flip the tokens of
-- sequence <= it). Its work does not grow with the owners.
local wk = marks_key(m)
local sequence = tonumber(redis.call('GET', SEQ) or 0)
set_mark(wk, sequence, renc)
local message = netstring(scope) .. netstring(key) .. netstring(renc)
  .. netstring(ARGV[17] or '@') .. netstring(string.format('%d', sequence))
local fields = redis.call('HGETALL', wk)
for i = 1, #fields, 2 do
  local w = fields[i]
  local c = string.byte(w, 1)
  if c ~= BANG and w ~= ARGV[9] then  -- a worker, not the mark
    redis.call('PUBLISH', P .. 'c:' .. w, message)
  end
end
return result
