-- Shared by every script, the task scripts included: the prefix, the member framing, a
-- worker's heartbeat key and the server's clock. Prepended first (see _scripts.source).
local P = ARGV[1]
local function hb_key(w) return P .. 'hb:' .. w end
-- '<n>:<s>': the framing of row members, pushed messages and the scripts' packed replies
-- (split below and _codec.split_netstrings read it back).
local function netstring(s) return #s .. ':' .. s end
local function member(scope, key) return netstring(scope) .. key end
-- Sigils, as the first byte of a value (string.byte): '!' a mark, or a claimed waiting
-- cancellation; '*' a pending row; and SYNC's operations 'T', 'U', 'S' ('F' the rest).
local BANG, STAR = 33, 42
local OP_TRACK, OP_UNTRACK, OP_SWEEP = 84, 85, 83
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
