-- REMOVE: delete one cancellation row (registry.clear()).
-- KEYS[1]: P scopes (routing only).
-- ARGV (built by _contracts.RemoveCall.argv):
--   1 prefix   P
--   2 scope    the caller's scope
--   3 key      the request id
-- Reply (decoded by _contracts.RemoveCall.removed): 1 if the row existed, else 0 (an
-- absent row writes nothing).
return remove_row(ARGV[2], ARGV[3])
