-- TASK_GET: read a task; end it failed if its worker stopped. docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _tasks.RedisTaskTable.get): 1 prefix P, 2 scope, 3 task id,
--   4 grace_ms (a worker is dead once its heartbeat is gone and the task is older than
--   this), 5 the error a dead worker's task ends with, 6 now (ms, for 'updated').
-- Reply: {1 if this call ended the task (its worker died) else 0, the task's fields
-- (HGETALL)}, or false when there is none in this scope.
local task = P .. 'task:' .. member(ARGV[2], ARGV[3])
local status = redis.call('HGET', task, 'status')
if not status then return false end
if status == 'working' or status == 'input_required' then
  local worker = redis.call('HGET', task, 'worker') or ''
  local born = tonumber(redis.call('HGET', task, '.born') or '0')
  local now = math.floor(now_us() / 1000)
  if redis.call('EXISTS', hb_key(worker)) == 0 and now - born > tonumber(ARGV[4]) then
    redis.call('HSET', task, 'status', 'failed', 'error', ARGV[5], 'updated', ARGV[6])
    return {1, redis.call('HGETALL', task)}
  end
end
return {0, redis.call('HGETALL', task)}
