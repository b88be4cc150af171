-- Delete a read-write lock whoever holds it, when it is in the asked-for mode, and wake its
-- waiters (Redisson's forceUnlock of the read or the write lock).
-- Needs: common/counter, common/claim, common/hash, rw/readers
-- Flags: allow-oom
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the wake-up channel redisson_rwlock:{<name>}
-- KEYS[3]  the hand-off claim relock_claim:{<name>}
-- ARGV[1]  the mode to force: "read" or "write"
-- ARGV[2]  the publish command: PUBLISH or SPUBLISH
-- ARGV[3]  the claim window in ms: a claim lives at most this much longer
--
-- Reply:   1 when the lock was deleted, 0 when it was not in that mode (or not there).
-- Errors:  WRONGTYPE when <name> holds another type.
local kind, wrong = hash_type(KEYS[1])
if wrong then
    return wrong
end
if kind == 'none' then
    return 0
end
if redis.call('hget', KEYS[1], 'mode') ~= ARGV[1] then
    return 0
end
rw_delete(KEYS[1])
claim_cut(KEYS[3], ARGV[3])
redis.call(ARGV[2], KEYS[2], ARGV[1] == 'read' and '0' or '1')
return 1
