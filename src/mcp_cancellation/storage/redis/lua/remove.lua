-- ARGV: prefix, scope, key. Returns 1 if the row existed (an absent row writes nothing).
return remove_row(ARGV[2], ARGV[3])
