-- TASK_CREATE: record a new task. docs/architecture.md, "Tasks".
-- KEYS[1]: P scopes (routing only; every key is built from P, the one hash tag).
-- ARGV (built by _tasks.RedisTaskTable.create, in this order):
--   1 prefix       P
--   2 scope        the caller's scope
--   3 task id      the task's id
--   4 quota        the scope's task quota ('' for none)
--   5 ttl_ms       how long the task and its result are kept
--   6..            the record's fields, name then value
-- Reply: 1 created; 0 the scope already holds quota tasks (nothing written).
local scope, id = ARGV[2], ARGV[3]
local now = math.floor(now_us() / 1000)
local ttl = tonumber(ARGV[5])
local expiry = string.format('%.0f', now + ttl)
local quota_key = P .. 'tasks:' .. scope
redis.call('ZREMRANGEBYSCORE', quota_key, '-inf', now)
local quota = tonumber(ARGV[4])
if quota and redis.call('ZCARD', quota_key) >= quota then return 0 end
local m = member(scope, id)
local task = P .. 'task:' .. m
redis.call('HSET', task, '.born', string.format('%.0f', now), unpack(ARGV, 6))
redis.call('PEXPIRE', task, ttl)
redis.call('ZADD', quota_key, expiry, id)
if redis.call('PTTL', quota_key) < ttl then redis.call('PEXPIRE', quota_key, ttl) end
redis.call('ZREMRANGEBYSCORE', P .. 'tasks', '-inf', now)
redis.call('ZADD', P .. 'tasks', expiry, m)
if redis.call('PTTL', P .. 'tasks') < ttl then redis.call('PEXPIRE', P .. 'tasks', ttl) end
return 1
