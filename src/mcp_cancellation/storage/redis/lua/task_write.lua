-- TASK_WRITE: the running task's worker writes its state. docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.TaskWriteCall.argv): 1 prefix P, 2 scope, 3 task id,
--   4.. field, value pairs (an empty value removes an 'i:' or 'a:' field).
-- Reply: 1 written; 0 the task is unknown or has ended (nothing written). A terminal
-- 'status' ends the task: it expires its ttl from now. An end carries its writer's
-- '.ender': the same end written again (its first call's caller timed out, and the
-- call ran all the same) is answered 1, so that its writer reports it.
local m = member(ARGV[2], ARGV[3])
local task = task_key(m)
local status = redis.call('HGET', task, 'status')
if not status then return 0 end
if not active(status) then
  local ender = redis.call('HGET', task, '.ender')
  for i = 4, #ARGV - 1, 2 do
    if ARGV[i] == '.ender' and ARGV[i + 1] == ender then return 1 end
  end
  return 0
end
local ends = false
for i = 4, #ARGV - 1, 2 do
  local name, value = ARGV[i], ARGV[i + 1]
  local kind = string.sub(name, 1, 2)
  if value == '' and (kind == 'i:' or kind == 'a:') then
    redis.call('HDEL', task, name)
  else
    redis.call('HSET', task, name, value)
    if name == 'status' and not active(value) then ends = true end
  end
end
if ends then end_task(m, now_ms()) end
return 1
