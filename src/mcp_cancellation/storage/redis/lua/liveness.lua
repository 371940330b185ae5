-- Liveness (docs/architecture.md, "A worker's own state"): whether a worker lives is
-- judged on the table's own clock, never on Redis's alone. P pulse ('<Redis ms>:<table
-- ms>') runs with Redis's clock while beats and judgments come at least every `gap`
-- (3/8 of the heartbeat TTL: every live worker beats every quarter of it), and by no more
-- than `gap` across a longer silence of the whole table (Redis stalled: SIGSTOP, a slow
-- fork, a failover, a paused VM). P hb:<worker> holds the table's time of the worker's
-- last beat and its heartbeat TTL (kept a day, for garbage only): the worker is dead
-- once its beat lags the table's clock by more than its TTL, that is only while the
-- table ran and the worker was silent. Prepended after base.lua to SYNC, CLEANUP, BEAT, TASK_GET and TASK_REAP.
local PULSE = P .. 'pulse'
local BEAT_KEPT = 86400000
-- The table's clock now (ms), advanced (`keep`: read only, for a worker's SYNC, which
-- the beats and judgments around it advance).
local function table_ms(beat_ms, keep)
  local now = math.floor(now_us() / 1000)
  local v = redis.call('GET', PULSE)
  local t = now
  if v then
    local colon = string.find(v, ':', 1, true)
    local last = tonumber(string.sub(v, 1, colon - 1))
    local gap = math.max(0, math.min(now - last, math.floor(beat_ms * 3 / 8)))
    t = tonumber(string.sub(v, colon + 1)) + gap
  end
  if not keep then redis.call('SET', PULSE, string.format('%.0f:%.0f', now, t)) end
  return t
end
-- Whether worker w lives at the table's time t: its last beat ('<table ms>:<its heartbeat
-- TTL ms>') lags t by at most the worker's own heartbeat TTL.
local function alive(w, t)
  local v = redis.call('GET', hb_key(w))
  if not v then return false end
  local colon = string.find(v, ':', 1, true)
  if not colon then return false end
  return t - tonumber(string.sub(v, 1, colon - 1)) <= tonumber(string.sub(v, colon + 1))
end
-- Beat for worker w (heartbeat TTL beat_ms): 0 it lived, 1 its last beat had lapsed (or
-- is of an unknown form), 2 it had none.
local function beat(w, beat_ms, t)
  local value = string.format('%.0f:%.0f', t, beat_ms)
  local before = redis.call('SET', hb_key(w), value, 'PX', BEAT_KEPT, 'GET')
  if not before then return 2 end
  local colon = string.find(before, ':', 1, true)
  if not colon or t - tonumber(string.sub(before, 1, colon - 1)) > beat_ms then return 1 end
  return 0
end
