-- TASK_CREATE: record a new task, running. docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only; every key is built from P, the one hash tag).
-- ARGV (built by _contracts.TaskCreateCall.argv, in this order):
--   1 prefix       P
--   2 scope        the caller's scope
--   3 task id      the task's id
--   4 quota        the scope's task quota ('' for none)
--   5 max_tasks    the table's task bound ('' for none)
--   6 worker       the worker that runs it
--   7..            the record's fields, name then value
-- Reply: 1 created; 0 the scope already holds quota tasks; 2 the table holds max_tasks
-- tasks (nothing written for either refusal). Expired entries are pruned first; running
-- tasks never expire, so both bounds count every task whose tool runs.
local scope, id, worker = ARGV[2], ARGV[3], ARGV[6]
local now = now_ms()
local quota_key = scope_tasks(scope)
redis.call('ZREMRANGEBYSCORE', quota_key, '-inf', now)
local quota = tonumber(ARGV[4])
if quota and redis.call('ZCARD', quota_key) >= quota then return 0 end
redis.call('ZREMRANGEBYSCORE', ALL, '-inf', now)
local cap = tonumber(ARGV[5])
if cap and redis.call('ZCARD', ALL) >= cap then return 2 end
local m = member(scope, id)
redis.call('HSET', task_key(m), '.born', ms(now), unpack(ARGV, 7))
index_running(scope, id, m, worker)
return 1
