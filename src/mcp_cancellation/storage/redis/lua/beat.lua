-- BEAT: a worker's heartbeat, from its liveness beater (never its event loop).
-- docs/architecture.md, "A worker's own state".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.BeatCall.argv): 1 prefix P, 2 worker, 3 heartbeat_ms.
-- Reply: 0 the worker lived; 1 its last beat had lapsed (others may have acted on its
-- silence); 2 it had no beat (a new worker, or the table was lost).
local beat_ms = tonumber(ARGV[3])
return beat(ARGV[2], beat_ms, table_ms(beat_ms))
