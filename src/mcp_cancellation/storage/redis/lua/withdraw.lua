-- WITHDRAW: end a waiting cancellation (see ADD and claim_waiting() in owners.lua), before
-- its caller is answered. docs/architecture.md, "The Redis table".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.WithdrawCall.argv): 1 prefix, 2 scope, 3 key, 4 waiter,
--   5 lapse_ms (how long it is kept as a lapsed cancellation if no track claimed it; 0:
--   not kept), 6 the most lapsed cancellations its scope keeps.
-- Reply: 1 if a track claimed it while it waited (the cancellation stopped a request),
-- else 0 (it lapsed: kept as P lm:<m>, see owners.lua).
local scope, key, waiter = ARGV[2], ARGV[3], ARGV[4]
local m = member(scope, key)
local wk = wait_key(m)
local v = redis.call('HGET', wk, waiter)
redis.call('HDEL', wk, waiter)
redis.call('ZREM', waiting_key(scope), netstring(key) .. waiter)
if v and string.byte(v, 1) == BANG then return 1 end
local lapse_ms, kept = tonumber(ARGV[5]), tonumber(ARGV[6])
if v and lapse_ms > 0 then
  local now = now_us()
  local lapses = lapses_key(scope)
  redis.call('SET', lapsed_key(m), string.format('%.0f:', now) .. v, 'PX', lapse_ms)
  redis.call('ZADD', lapses, string.format('%.0f', now), key)
  redis.call('ZREMRANGEBYSCORE', lapses, '-inf', string.format('(%.0f', now - 1000 * lapse_ms))
  local over = redis.call('ZCARD', lapses) - kept
  if over > 0 then
    local oldest = redis.call('ZPOPMIN', lapses, over)  -- (member, score pairs)
    for i = 1, #oldest, 2 do redis.call('DEL', lapsed_key(member(scope, oldest[i]))) end
  end
  redis.call('PEXPIRE', lapses, lapse_ms)
end
return 0
