-- ARGV: prefix, then (scope, key) pairs of requests whose FINISH did not reach Redis.
-- Removes each pair's cancellation row, as that FINISH would have, unless a request with
-- that id is in flight again (its own FINISH removes the row then).
-- Returns the number of rows removed.
local removed = 0
local i = 2
while i <= #ARGV do
  local scope, key = ARGV[i], ARGV[i + 1]
  if redis.call('EXISTS', flight_key(member(scope, key))) == 0 then
    removed = removed + remove_row(scope, key)
  end
  i = i + 2
end
return removed
