-- Delete a lock whoever holds it, and wake a waiter. A name held as a read-write lock (the hash
-- has a `mode`) goes with its readers' timeout keys, as rw/force_release.lua deletes it.
-- Needs: common/counter, common/claim, common/hash, rw/readers
-- Flags: allow-oom
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the wake-up channel redisson_lock__channel:{<name>}
-- KEYS[3]  the hand-off claim relock_claim:{<name>}
-- KEYS[4]  (optional) the lock-delay's shadow lease relock_lease:{<name>} (lua/common/delay.lua): deleted,
--          so a force-unlock frees the name at once, ending any lock-delay in force
-- ARGV[1]  the message to publish ("0")
-- ARGV[2]  the publish command: PUBLISH (or SPUBLISH); empty: publish nothing (a spin lock)
-- ARGV[3]  the claim window in ms: a claim lives at most this much longer
--
-- Reply:   1 when a lock was deleted, or when, the lock being gone, a lock-delay in force was
--          ended; 0 when there was neither.
-- Errors:  WRONGTYPE when <name> holds another type: a user's string is never deleted.
local kind, wrong = hash_type(KEYS[1])
if wrong then
    return wrong
end
local shadow = KEYS[4] and on_key(4, 'strlen') and KEYS[4]
if kind == 'none' then
    if not shadow or redis.call('pttl', shadow) <= 0 then
        return 0
    end
    redis.call('del', shadow)
    claim_cut(KEYS[3], ARGV[3])
    if ARGV[2] ~= '' then
        redis.call(ARGV[2], KEYS[2], ARGV[1])
    end
    return 1
end
if redis.call('hexists', KEYS[1], 'mode') == 1 then
    rw_delete(KEYS[1])
else
    redis.call('del', KEYS[1])
end
if shadow then
    redis.call('del', shadow)
end
claim_cut(KEYS[3], ARGV[3])
if ARGV[2] ~= '' then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return 1
