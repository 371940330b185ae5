-- ARGV: prefix, worker, heartbeat TTL (ms), n, then n (scope, key, owner) triples to
-- (re)track, then (scope, key, owner) triples to untrack.
-- Refreshes the heartbeat; returns the encoded reason (or nil) of each tracked triple.
local w = ARGV[2]
redis.call('SET', hb_key(w), '1', 'PX', ARGV[3])
local n = tonumber(ARGV[4])
local out = {}
local i = 5
for t = 1, n do
  local m = track(ARGV[i], ARGV[i + 1], ARGV[i + 2], w)
  out[t] = redis.call('HGET', REASONS, m)
  i = i + 3
end
while i <= #ARGV do
  untrack(ARGV[i], ARGV[i + 1], ARGV[i + 2])
  i = i + 3
end
return out
