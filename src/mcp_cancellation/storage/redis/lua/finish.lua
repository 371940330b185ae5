-- ARGV: prefix, scope, key, owner: untrack the owner, then remove the cancellation row.
untrack(ARGV[2], ARGV[3], ARGV[4])
return remove_row(ARGV[2], ARGV[3])
