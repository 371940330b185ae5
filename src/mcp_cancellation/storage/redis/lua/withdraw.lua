-- WITHDRAW: end a waiting cancellation (see ADD and claim_waiting() in owners.lua), before
-- its caller is answered. docs/architecture.md, "The Redis table".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.WithdrawCall.argv): 1 prefix, 2 scope, 3 key, 4 waiter.
-- Reply: 1 if a track claimed it while it waited (the cancellation stopped a request),
-- else 0.
local scope, key, waiter = ARGV[2], ARGV[3], ARGV[4]
local wk = wait_key(member(scope, key))
local v = redis.call('HGET', wk, waiter)
redis.call('HDEL', wk, waiter)
redis.call('ZREM', waiting_key(scope), netstring(key) .. waiter)
if v and string.byte(v, 1) == BANG then return 1 end
return 0
