-- Acquire a reentrant lock, or count one more hold for its owner.
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the hand-off claim relock_claim:{<name>}: the holder field of the waiter that the
--          lock's next free moment is promised to
-- ARGV[1]  lease in milliseconds (PEXPIRE of the hash)
-- ARGV[2]  holder field <client-uuid>:<owner>
-- ARGV[3]  "1": when the lock is busy, claim its next hand-off for this field unless another
--          field has; anything else: do not claim
-- ARGV[4]  the claim window in ms: how long a claim outlives the lease it waits on
--
-- Reply:   nil when the hold was taken (new hold or re-entry), else how long to wait at most
--          before trying again, in ms: the lock's remaining TTL (PTTL: -1 if it has none), or,
--          when the lock is free but claimed by another waiter, the claim's.
-- Errors:  WRONGTYPE when <name> exists but is not a hash.
--
-- Same data and replies as Redisson's RLock acquire, so both exclude each other; Redisson does
-- not read claims, so its clients may take a claimed lock.
if redis.call('exists', KEYS[1]) == 0 then
    local claimant = redis.call('get', KEYS[2])
    if claimant and claimant ~= ARGV[2] then
        return math.max(redis.call('pttl', KEYS[2]), 1)
    end
    if claimant then
        redis.call('del', KEYS[2])
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
local ttl = redis.call('pttl', KEYS[1])
if ARGV[3] == '1' then
    local claimant = redis.call('get', KEYS[2])
    if not claimant or claimant == ARGV[2] then
        redis.call('set', KEYS[2], ARGV[2], 'px', math.max(ttl, 0) + tonumber(ARGV[4]))
    end
end
return ttl
