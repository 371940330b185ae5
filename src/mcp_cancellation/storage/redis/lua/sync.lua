-- SYNC: one worker's queued writes, or (full) its whole state. docs/architecture.md,
-- "The Redis table".
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.SyncCall.argv):
--   1 prefix      P
--   2 worker      the worker's id
--   3 beat_ms     its heartbeat's TTL
--   4 epoch       the table's epoch as the worker knows it ('' for none)
--   5 grace_ms    how long a lost table refuses "not in flight"
--   6 full        '1': a resync (every request the worker has in flight); '0': a batch
--   7 recovering  what the worker marks recovering: '' nothing, '*' the table, else
--                 netstrings of scopes (see mark_recovering)
--   8 layout      '<partition>/<partitions>', written with a new epoch
--   9...          operations, (op, scope, key, owner) each, in order:
--                 'T<age µs>[:<tool>]' track (a request started <age> before the call,
--                 calling <tool>), 'U' untrack, 'S' sweep (a dead owner's: untrack,
--                 and remove the row if no owner is left), 'F' finish (untrack and
--                 remove the row).
-- A resync also releases the in-flight rows Redis holds for the worker beyond those it
-- sent (a lost write's, or rows a failover brought back). Refreshes the heartbeat.
-- Reply (decoded by _contracts.SyncReply): {epoch, 1 if the table the worker knew is lost,
-- 1 if the heartbeat was missing, then per 'T' its owner's sequence and the reason of the
-- cancellation that reaches it (a pending row or a waiting cancellation it claimed; for an
-- owner tracked again, the request's mark) or false, then the number of rows released as
-- stale}.
local w = ARGV[2]
local beat_ms = tonumber(ARGV[3])
local beat = beat(w, beat_ms, table_ms(beat_ms, true)) == 0
local epoch, lost = check_epoch(ARGV[4], ARGV[5], ARGV[8])
local full = ARGV[6] == '1'
-- A worker joins P workers with its heartbeat: while the heartbeat lives, the cleanup
-- leaves it there (and a resync, after any doubt, joins again).
if not beat or full or lost == 1 then redis.call('SADD', WORKERS, w) end
mark_recovering(ARGV[7], ARGV[5])
local out = {epoch, lost, beat and 0 or 1}
local keep = {}
for i = 9, #ARGV, 4 do
  local op, scope, key, owner = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local c = string.byte(op, 1)
  if c == OP_TRACK then
    local colon = string.find(op, ':', 2, true)
    local age = tonumber(string.sub(op, 2, colon and colon - 1 or -1))
    local tool = colon and string.sub(op, colon + 1) or ''
    local sequence, v = track(scope, key, owner, w, age, tool)
    if full then keep[netstring(member(scope, key)) .. owner] = true end
    out[#out + 1] = sequence
    out[#out + 1] = v or false
  elseif c == OP_UNTRACK then
    untrack(scope, key, owner, w)
  elseif c == OP_SWEEP then
    untrack(scope, key, owner, w)
    remove_orphan_row(scope, key)
  else
    untrack(scope, key, owner, w)
    remove_row(scope, key)
  end
end
local stale = 0
if full then
  for _, entry in ipairs(redis.call('SMEMBERS', owners_key(w))) do
    if not keep[entry] then
      local m, owner = split(entry)
      local scope, key = split(m)
      untrack_member(m, scope, owner, w)
      remove_orphan_row(scope, key)
      stale = stale + 1
    end
  end
end
out[#out + 1] = stale
return out
