-- TASK_ANSWER: keep a tasks/update's answers. docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.TaskAnswerCall.argv): 1 prefix P, 2 scope, 3 task id,
--   4.. key, answer pairs.
-- Reply: 1 the task is known (each answer kept if its key waits and has none yet; once
-- every request it waits on is answered, it is 'working' again); 0 unknown. A kept
-- answer is pushed to the task's worker ('a' then the netstrings of scope and task id on
-- P c:<worker>), which wakes the tool that waits for it.
local task = task_key(member(ARGV[2], ARGV[3]))
if redis.call('EXISTS', task) == 0 then return 0 end
local kept = 0
for i = 4, #ARGV - 1, 2 do
  if redis.call('HEXISTS', task, 'i:' .. ARGV[i]) == 1 then
    kept = kept + redis.call('HSETNX', task, 'a:' .. ARGV[i], ARGV[i + 1])
  end
end
if kept == 0 then return 1 end
local status = redis.call('HGET', task, 'status')
if status == 'input_required' then
  local waiting = false
  for _, name in ipairs(redis.call('HKEYS', task)) do
    local answer = 'a:' .. string.sub(name, 3)
    if string.sub(name, 1, 2) == 'i:' and redis.call('HEXISTS', task, answer) == 0 then
      waiting = true
      break
    end
  end
  if not waiting then redis.call('HSET', task, 'status', 'working') end
end
if active(status) then
  local worker = redis.call('HGET', task, 'worker') or ''
  redis.call('PUBLISH', P .. 'c:' .. worker, 'a' .. netstring(ARGV[2]) .. netstring(ARGV[3]))
end
return 1
