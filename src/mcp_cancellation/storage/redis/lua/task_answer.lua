-- TASK_ANSWER: keep a tasks/update's answers. docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _tasks.RedisTaskTable.answer): 1 prefix P, 2 scope, 3 task id,
--   4.. key, answer pairs.
-- Reply: 1 the task is known (each answer kept if its key waits and has none yet; once
-- every request it waits on is answered, it is 'working' again); 0 unknown.
local task = P .. 'task:' .. member(ARGV[2], ARGV[3])
if redis.call('EXISTS', task) == 0 then return 0 end
for i = 4, #ARGV - 1, 2 do
  if redis.call('HEXISTS', task, 'i:' .. ARGV[i]) == 1 then
    redis.call('HSETNX', task, 'a:' .. ARGV[i], ARGV[i + 1])
  end
end
if redis.call('HGET', task, 'status') == 'input_required' then
  for _, name in ipairs(redis.call('HKEYS', task)) do
    if string.sub(name, 1, 2) == 'i:' and redis.call('HEXISTS', task, 'a:' .. string.sub(name, 3)) == 0 then
      return 1
    end
  end
  redis.call('HSET', task, 'status', 'working')
end
return 1
