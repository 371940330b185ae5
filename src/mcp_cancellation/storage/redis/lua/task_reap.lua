-- TASK_REAP: end the running tasks of dead workers (liveness.lua), and hand the caller
-- the orphaned ends to report. docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.TaskReapCall.argv): 1 prefix P, then _contracts.Orphaning's:
--   2 heartbeat_ms (a task younger than this is left: its worker may not have beaten
--   yet), 3 the error a dead worker's task ends with, 4 now (ms, for 'updated'), 5 its
--   status message, 6 lease_ms; then 7 the most tasks one call ends (and hands), 8.. the
--   orphans the caller reported since its last call.
-- Every orphaned end (this script's and TASK_GET's) waits in P orphans, scored by when
-- the worker it was handed to may be taken not to have reported it (0: handed to none):
-- each is reported by the worker that gets it and acknowledges it, once, even when a
-- call's caller timed out (it is handed again when its lease lapses).
-- Reply: the orphaned ends to report now, {member, tool, created ms} each.
local heartbeat_ms, limit = tonumber(ARGV[2]), tonumber(ARGV[7])
local now = now_ms()
local t = table_ms(heartbeat_ms)
if #ARGV >= 8 then redis.call('ZREM', ORPHANS, unpack(ARGV, 8)) end
local ended = 0
for _, w in ipairs(redis.call('SMEMBERS', RUNNERS)) do
  if not alive(w, t) then
    local runs = runs_key(w)
    for _, m in ipairs(redis.call('SMEMBERS', runs)) do
      if ended >= limit then break end
      local task = task_key(m)
      local fields = redis.call('HMGET', task, 'status', 'worker', '.born')
      if not fields[1] or not active(fields[1]) or fields[2] ~= w then
        redis.call('SREM', runs, m)
      elseif now - tonumber(fields[3] or '0') > heartbeat_ms then
        orphan(m, now, ARGV[3], ARGV[4], ARGV[5], 0)
        ended = ended + 1
      end
    end
    if redis.call('SCARD', runs) == 0 then redis.call('SREM', RUNNERS, w) end
  end
end
local out = {}
local due = redis.call('ZRANGEBYSCORE', ORPHANS, '-inf', ms(now), 'LIMIT', 0, limit)
for _, m in ipairs(due) do
  redis.call('ZADD', ORPHANS, ms(now + tonumber(ARGV[6])), m)
  local fields = redis.call('HMGET', task_key(m), 'tool', 'created')
  out[#out + 1] = m
  out[#out + 1] = fields[1] or ''
  out[#out + 1] = fields[2] or '0'
end
return out
