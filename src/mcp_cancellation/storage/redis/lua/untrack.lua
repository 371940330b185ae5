-- ARGV: prefix, scope, key, owner. Returns 1 if the row existed.
return untrack(ARGV[2], ARGV[3], ARGV[4])
