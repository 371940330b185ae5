-- ARGV: prefix, worker, heartbeat TTL (ms), the epoch the worker knows ('' for none), the
-- grace of a lost table (ms), full ('1': a resync, '0': a batch), recovering ('1': the
-- worker's earlier calls failed, so `P lost` marks the grace period too), the table's
-- layout ('<partition>/<partitions>', written with a new epoch), then operations as
-- (op, scope, key, owner) quads, in order: 'T' track ('T<us>[,<floor>][:<tool>]': of a
-- request started <us> microseconds ago, and not before Redis time <floor> (µs), which
-- may claim a cancellation that missed it, see track(); calling <tool>), 'U' untrack,
-- 'R' release (untrack, and remove the row if it is bound and no owner is left: a dead
-- owner's), 'F' finish (untrack and remove the row).
-- A resync ('1') sends a 'T' for every request the worker has in flight, and its in-flight
-- rows that Redis holds beyond those (a lost write's, or rows a failover brought back)
-- are released.
-- Refreshes the worker's heartbeat. Returns {epoch, 1 if the table the worker knew is
-- lost, 1 if the heartbeat was missing, then one reason (or nil) per 'T': the pending
-- row it claimed, or on a resync the cancellation of that owner, or {µs, reason} for the
-- worker to decide (see track()); then the number of rows released as stale}.
local w = ARGV[2]
local beat = redis.call('SET', hb_key(w), '1', 'PX', ARGV[3], 'GET')
redis.call('SADD', WORKERS, w)  -- (left by the cleanup of a worker whose heartbeat lapsed)
local epoch, lost = check_epoch(ARGV[4], ARGV[5], ARGV[8])
local full = ARGV[6] == '1'
if ARGV[7] == '1' then redis.call('SET', LOST, '1', 'PX', ARGV[5]) end
local out = {epoch, lost, beat and 0 or 1}
local keep = {}
for i = 9, #ARGV, 4 do
  local op, scope, key, owner = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local c = string.byte(op, 1)
  if c == 84 then  -- 'T'
    local colon = string.find(op, ':', 2, true)
    local times = string.sub(op, 2, colon and colon - 1 or -1)
    local comma = string.find(times, ',', 1, true)
    local age = tonumber(comma and string.sub(times, 1, comma - 1) or times)
    local floor = comma and tonumber(string.sub(times, comma + 1)) or nil
    local tool = colon and string.sub(op, colon + 1) or ''
    local v = track(scope, key, owner, w, age, tool, floor)
    if full then
      local m = member(scope, key)
      keep[netstring(m) .. owner] = true
      v = v or redis.call('HGET', flight_key(m), '!' .. owner)
    end
    out[#out + 1] = v or false
  elseif c == 85 then  -- 'U'
    untrack(scope, key, owner)
  elseif c == 82 then  -- 'R'
    untrack(scope, key, owner)
    release_row(scope, key)
  else
    untrack(scope, key, owner)
    remove_row(scope, key)
  end
end
local stale = 0
if full then
  for _, entry in ipairs(redis.call('SMEMBERS', worker_key(w))) do
    if not keep[entry] then
      local m, owner = split(entry)
      local scope, key = split(m)
      untrack_member(m, scope, owner)
      release_row(scope, key)
      stale = stale + 1
    end
  end
end
out[#out + 1] = stale
return out
