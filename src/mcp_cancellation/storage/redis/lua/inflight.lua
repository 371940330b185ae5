-- ARGV: prefix.
-- Returns every in-flight row an operator may see, as triples: the row's entry
-- (<#m>:<m><owner>), its info (start in ms, worker and tool, tab-separated) and the
-- owner's cancellation mark (its encoded reason), or false.
local out = {}
local all = redis.call('HGETALL', INFO)
for i = 1, #all, 2 do
  local m, owner = split(all[i])
  out[#out + 1] = all[i]
  out[#out + 1] = all[i + 1]
  out[#out + 1] = redis.call('HGET', flight_key(m), '!' .. owner) or false
end
return out
