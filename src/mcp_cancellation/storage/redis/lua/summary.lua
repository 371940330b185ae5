-- SUMMARY: what a scrape reads of the table, O(k log n) (walking at most k levels down
-- from the largest size).
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.SummaryCall.argv):
--   1 prefix     P
--   2 k          how many of the largest scopes
--   3 at_least   count the scopes holding at least this many rows ('' for none)
-- Reply (decoded by _contracts.SummaryCall.decode): {P kinds as field/value pairs, P fs
-- likewise, the k largest scopes and their counts in eviction order (largest first,
-- equal sizes oldest row first), the number of scopes holding at least at_least rows,
-- the running tasks by tool (P trunning, lua/tasks.lua) as field/value pairs}.
local k = tonumber(ARGV[2])
ensure_kinds()
local largest = {}
local top = redis.call('ZREVRANGE', SCOPES, 0, 0, 'WITHSCORES')
local size = top[2] and tonumber(top[2])
local found = 0
while size and found < k do
  for _, scope in ipairs(redis.call('ZRANGE', level_key(size), 0, k - found - 1)) do
    largest[#largest + 1] = scope
    largest[#largest + 1] = size
    found = found + 1
  end
  if found >= k then break end
  local below = redis.call('ZREVRANGEBYSCORE', SCOPES, '(' .. size, '-inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  size = below[2] and tonumber(below[2])
end
local near = 0
if ARGV[3] and ARGV[3] ~= '' then near = redis.call('ZCOUNT', SCOPES, ARGV[3], '+inf') end
local running = redis.call('HGETALL', P .. 'trunning')
return {redis.call('HGETALL', KINDS), redis.call('HGETALL', FS), largest, near, running}
