-- TASK_REAP: end the running tasks of workers whose heartbeat is gone.
-- docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.TaskReapCall.argv): 1 prefix P, 2 heartbeat_ms (a task younger
--   than this is left: its worker may not have beaten yet), 3 the error a dead worker's
--   task ends with, 4 now (ms, for 'updated'), 5 the most tasks one call ends, 6 its
--   status message.
-- Reply: the tasks this call ended, {member, tool, created ms} each (their ends are
-- reported by the caller: nobody else will).
local heartbeat_ms, limit = tonumber(ARGV[2]), tonumber(ARGV[5])
local now = now_ms()
local out = {}
for _, w in ipairs(redis.call('SMEMBERS', RUNNERS)) do
  if redis.call('EXISTS', hb_key(w)) == 0 then
    local runs = runs_key(w)
    for _, m in ipairs(redis.call('SMEMBERS', runs)) do
      if #out >= 3 * limit then return out end
      local task = task_key(m)
      local fields = redis.call('HMGET', task, 'status', 'worker', '.born', 'tool', 'created')
      if not fields[1] or not active(fields[1]) or fields[2] ~= w then
        redis.call('SREM', runs, m)
      elseif now - tonumber(fields[3] or '0') > heartbeat_ms then
        redis.call('HSET', task, 'status', 'failed', 'error', ARGV[3], 'updated', ARGV[4],
          'message', ARGV[6])
        end_task(m, now)
        out[#out + 1] = m
        out[#out + 1] = fields[4] or ''
        out[#out + 1] = fields[5] or '0'
      end
    end
    if redis.call('SCARD', runs) == 0 then redis.call('SREM', RUNNERS, w) end
  end
end
return out
