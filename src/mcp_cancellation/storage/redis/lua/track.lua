-- ARGV: prefix, scope, key, owner, worker, heartbeat TTL (ms).
-- Returns {encoded reason of an existing cancellation row or nil, 1 if the worker's
-- heartbeat was missing (its other rows may have been swept: resync) else 0}.
local m = track(ARGV[2], ARGV[3], ARGV[4], ARGV[5])
local created = redis.call('SET', hb_key(ARGV[5]), '1', 'PX', ARGV[6], 'NX')
return {redis.call('HGET', REASONS, m), created and 1 or 0}
