-- ARGV: prefix, scope, key, reason (encoded), require_in_flight ("1"/"0"), quota ("" for
-- none), cap ("" for none), eviction batch, this worker's id, the most rows this call may
-- evict ("" for no bound), rows of a batch an earlier call left owed ("" for none) and the
-- scope it was part-way through ("" for none), shadow quota ("1": record past the quota
-- and say so, "" or "0": refuse), the table's epoch as this worker knows it ("" for none)
-- the grace of a lost table (ms), recovering ("1": this worker saw Redis fail within
-- the grace period, so `P lost` marks it too), and the origin ("@operator" for an
-- operator's cancellation, else "@"), carried in each pushed message so that the worker
-- whose call it stops can report it.
-- A row is bound to the owners in flight (each gets its mark in P f:<m>), or pending
-- ('*' before its reason) when none is: see track() in the prelude.
-- Returns {outcome, one-row scopes evicted, rows still owed, scope part-way, over quota
-- (1 or 0), the other evictions, 1 if this worker's epoch is old (it must resync), and
-- for ``not_in_flight`` the time (µs) of the miss it left, see track()}. Outcome
-- ``evicting`` means the call spent its eviction
-- budget before the batch was done and wrote nothing else: the caller calls again with
-- the owed rows and the scope, so that no single script holds Redis for long, and the
-- calls together evict exactly what one unbounded call would. Evictions are packed as
-- netstrings, so that a batch of thousands of scopes is two reply elements: the other
-- evictions as (scope, count) pairs in eviction order, then the scopes evicted whole with
-- one row each (an address-rotation flood), which come after them, as scopes alone.
-- Outcome ``behind``: the table was lost (or this worker's epoch is old) and workers may
-- not have re-tracked their requests yet; nothing was written.
local scope, key, renc = ARGV[2], ARGV[3], ARGV[4]
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
local _, lost = check_epoch(ARGV[14] or '', ARGV[15] or '1000')
result[7] = lost
if ARGV[16] == '1' then redis.call('SET', LOST, '1', 'PX', ARGV[15]) end
if owed > 0 then
  owed, budget, partial = evict(owed, budget, partial, evicted, singles)
  if owed > 0 then return done('evicting') end
end
local in_flight = redis.call('EXISTS', fk) == 1
if ARGV[5] == '1' and not in_flight then
  if redis.call('EXISTS', LOST) == 1 then return done('behind') end
  -- A request may have started with its track still on its way here (a worker waits for
  -- it at most max_wait): that track claims this cancellation (see track()).
  local at = string.format('%.0f', now_us())
  redis.call('SET', miss_key(m), at .. ' ' .. renc, 'PX', MISS_MS)
  result[8] = at  -- this worker's requests that start from now on cannot have been meant
  return done('not_in_flight')
end
local stored = in_flight and renc or ('*' .. renc)
if redis.call('HEXISTS', REASONS, m) == 1 then
  redis.call('HSET', REASONS, m, stored)
  result[1] = 'updated'
else
  local count = count_of(scope)
  if ARGV[6] ~= '' and count >= tonumber(ARGV[6]) then
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
-- Push the cancellation to every other worker that tracks the request.
local owners = redis.call('HGETALL', fk)
local by_worker = {}
local workers = {}
local marks = {}
local origin = netstring(ARGV[17] or '@')
for i = 1, #owners, 2 do
  local w = owners[i + 1]
  if string.byte(owners[i], 1) ~= 33 then  -- an owner, not a mark ('!')
    marks[#marks + 1] = '!' .. owners[i]
    marks[#marks + 1] = renc
  end
  if w ~= ARGV[9] and string.byte(owners[i], 1) ~= 33 then
    local msg = by_worker[w]
    if msg == nil then
      msg = {netstring(scope), netstring(key), netstring(renc), origin}
      by_worker[w] = msg
      workers[#workers + 1] = w
    end
    msg[#msg + 1] = netstring(owners[i])
  end
end
-- (in slices: thousands of owners of one id exceed what unpack() may spread)
bulk('HSET', fk, marks)
for _, w in ipairs(workers) do
  redis.call('PUBLISH', P .. 'c:' .. w, table.concat(by_worker[w]))
end
return result
