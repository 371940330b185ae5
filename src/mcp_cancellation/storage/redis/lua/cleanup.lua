-- ARGV: prefix, this worker, TTL in microseconds ("" for none), batch limit, then
-- (scope, key, owner) triples of dead owners to untrack.
-- Returns {removed, in_flight_removed, more} (more = 1 if the TTL sweep hit the limit).
local removed, in_flight_removed, more = 0, 0, 0
local i = 5
while i <= #ARGV do
  in_flight_removed = in_flight_removed + untrack(ARGV[i], ARGV[i + 1], ARGV[i + 2])
  i = i + 3
end
-- In-flight rows of other workers whose heartbeat expired (killed, or cut off too long).
for _, other in ipairs(redis.call('SMEMBERS', WORKERS)) do
  if other ~= ARGV[2] and redis.call('EXISTS', hb_key(other)) == 0 then
    for _, entry in ipairs(redis.call('SMEMBERS', worker_key(other))) do
      local m, owner = split(entry)
      local scope = split(m)
      if redis.call('HDEL', flight_key(m), owner) == 1 then
        in_flight_removed = in_flight_removed + 1
        if redis.call('HINCRBY', FS, scope, -1) <= 0 then redis.call('HDEL', FS, scope) end
      end
    end
    redis.call('DEL', worker_key(other))
    redis.call('SREM', WORKERS, other)
  end
end
if ARGV[3] ~= '' then
  local deadline = string.format('%.0f', now_us() - tonumber(ARGV[3]))
  local limit = tonumber(ARGV[4])
  local expired = redis.call('ZRANGEBYSCORE', AGES, '-inf', '(' .. deadline, 'LIMIT', 0, limit)
  if #expired >= limit then more = 1 end
  local by_scope, order = {}, {}
  for _, m in ipairs(expired) do
    local scope, key = split(m)
    local keys = by_scope[scope]
    if keys == nil then
      keys = {}
      by_scope[scope] = keys
      order[#order + 1] = scope
    end
    keys[#keys + 1] = key
  end
  for _, scope in ipairs(order) do
    local count = count_of(scope)
    drop_rows(scope, by_scope[scope])
    relevel(scope, count)
    removed = removed + #by_scope[scope]
  end
end
return {removed, in_flight_removed, more}
