-- TASK_CLAIM: after a resync, the worker running a task claims it again.
-- docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.TaskClaimCall.argv): 1 prefix P, 2 scope, 3 task id, 4 worker,
--   5.. the record's fields as the run knows them (written only if the task is gone).
-- Reply: 0 the task is the worker's and runs (its indexes restored); 1 it was gone (the
-- table was lost) and is written again, running; 2 it has ended, or belongs to another
-- worker (its worker was thought dead): the run must stop and write nothing more.
local scope, id, worker = ARGV[2], ARGV[3], ARGV[4]
local m = member(scope, id)
local task = task_key(m)
local status = redis.call('HGET', task, 'status')
if not status then
  redis.call('HSET', task, '.born', ms(now_ms()), unpack(ARGV, 5))
  index_running(scope, id, m, worker)
  return 1
end
if not active(status) or redis.call('HGET', task, 'worker') ~= worker then return 2 end
index_running(scope, id, m, worker)
return 0
