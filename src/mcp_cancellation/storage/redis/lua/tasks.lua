-- Shared by the task scripts (prepended after base.lua): a task's keys, its indexes and
-- its end. docs/architecture.md, "Tasks", has the keys and the states.
-- A running task never expires: its record has no TTL and its index entries score +inf;
-- its end gives both its expiry (the end plus its ttl).
local ALL = P .. 'tasks'
local RUNNERS = P .. 'trun'
local ORPHANS = P .. 'orphans'  -- orphaned ends to report (see task_reap.lua)
local function task_key(m) return P .. 'task:' .. m end
local function scope_tasks(scope) return P .. 'tasks:' .. scope end
local function runs_key(w) return P .. 'truns:' .. w end
local function now_ms() return math.floor(now_us() / 1000) end
local function ms(n) return string.format('%.0f', n) end
local function active(status) return status == 'working' or status == 'input_required' end
-- The scope and task id of a member '<#scope>:<scope><id>'.
local function unmember(m)
  local colon = string.find(m, ':', 1, true)
  local n = tonumber(string.sub(m, 1, colon - 1))
  return string.sub(m, colon + 1, colon + n), string.sub(m, colon + n + 1)
end
-- An index lives while it holds a running task, else until its last entry expires.
local function settle_index(key, now)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #last == 0 then return end
  local expiry = tonumber(last[2])
  if expiry == nil or expiry == math.huge or last[2] == 'inf' then
    redis.call('PERSIST', key)
  elseif expiry <= now then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, ms(expiry - now))
  end
end
-- P trunning: the running tasks by tool (what the tasks_running gauge shows, table-wide):
-- counted when a task joins P tasks running, and when it ends.
local RUNNING = P .. 'trunning'
local function count_running(m, by)
  local tool = redis.call('HGET', task_key(m), 'tool') or ''
  if redis.call('HINCRBY', RUNNING, tool, by) <= 0 then redis.call('HDEL', RUNNING, tool) end
end
-- Index a running task: no expiry while it runs, and in its worker's runs.
local function index_running(scope, id, m, worker)
  redis.call('ZADD', scope_tasks(scope), '+inf', id)
  redis.call('PERSIST', scope_tasks(scope))
  if redis.call('ZADD', ALL, '+inf', m) == 1 then count_running(m, 1) end
  redis.call('PERSIST', ALL)
  redis.call('SADD', runs_key(worker), m)
  redis.call('SADD', RUNNERS, worker)
end
-- A task's end (its terminal status already written): it expires ttl from now, and leaves
-- its worker's runs.
local function end_task(m, now)
  local task = task_key(m)
  local scope, id = unmember(m)
  local ttl = tonumber(redis.call('HGET', task, 'ttl') or '0') or 0
  local expiry = now + math.max(1, ttl)
  local score = redis.call('ZSCORE', ALL, m)
  if score and tonumber(score) == math.huge then count_running(m, -1) end
  redis.call('PEXPIRE', task, ms(math.max(1, ttl)))
  redis.call('ZADD', scope_tasks(scope), 'XX', ms(expiry), id)
  redis.call('ZADD', ALL, 'XX', ms(expiry), m)
  settle_index(scope_tasks(scope), now)
  settle_index(ALL, now)
  local worker = redis.call('HGET', task, 'worker') or ''
  redis.call('SREM', runs_key(worker), m)
end
-- A dead worker's task ends failed (the one path: TASK_GET and TASK_REAP), with `error`
-- and its `message`, 'updated' at `updated`; its end waits in P orphans to be reported,
-- scored `handed` (when the caller it is handed to may be taken not to have reported
-- it; 0: handed to none). See task_reap.lua.
local function orphan(m, now, error, updated, message, handed)
  redis.call('HSET', task_key(m), 'status', 'failed', 'error', error, 'updated', updated,
    'message', message)
  end_task(m, now)
  redis.call('ZADD', ORPHANS, ms(handed), m)
end
