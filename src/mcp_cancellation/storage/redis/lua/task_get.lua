-- TASK_GET: read a task; end it failed if its worker is dead. docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.TaskGetCall.argv): 1 prefix P, 2 scope, 3 task id,
--   4 heartbeat_ms (a worker is dead once its heartbeat is gone and the task is older than
--   this), 5 the error a dead worker's task ends with, 6 now (ms, for 'updated'),
--   7 its status message.
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
  if redis.call('EXISTS', hb_key(worker)) == 0 and now - born > tonumber(ARGV[4]) then
    redis.call('HSET', task, 'status', 'failed', 'error', ARGV[5], 'updated', ARGV[6],
      'message', ARGV[7])
    end_task(m, now)
    ended = 1
  end
end
return {ended, redis.call('HGETALL', task)}
