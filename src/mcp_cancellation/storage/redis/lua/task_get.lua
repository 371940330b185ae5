-- TASK_GET: read a task; end it failed if its worker is dead (liveness.lua).
-- docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.TaskGetCall.argv): 1 prefix P, 2 scope, 3 task id, then
--   _contracts.Orphaning's: 4 heartbeat_ms (a task younger than this is left: its worker
--   may not have beaten yet), 5 the error a dead worker's task ends with, 6 now (ms, for
--   'updated'), 7 its status message, 8 lease_ms (an end it makes is handed to its caller,
--   to report and acknowledge with its next TASK_REAP: see task_reap.lua).
-- Reply: {1 if this call ended the task (its worker is dead) else 0, the task's fields
-- (name, value pairs)}, or false when there is none in this scope.
local m = member(ARGV[2], ARGV[3])
local task = task_key(m)
local status = redis.call('HGET', task, 'status')
if not status then return false end
local ended = 0
if active(status) then
  local worker = redis.call('HGET', task, 'worker') or ''
  local born = tonumber(redis.call('HGET', task, '.born') or '0')
  local now = now_ms()
  local beat_ms = tonumber(ARGV[4])
  if now - born > beat_ms and not alive(worker, table_ms(beat_ms)) then
    orphan(m, now, ARGV[5], ARGV[6], ARGV[7], now + tonumber(ARGV[8]))
    ended = 1
  end
end
return {ended, redis.call('HGETALL', task)}
