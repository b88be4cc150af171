-- Take the write hold of a read-write lock (Redisson's RReadWriteLock write lock).
-- Needs: common/counter, common/claim, common/lease, rw/readers
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the hand-off claim relock_claim:{<name>}
-- ARGV[1]  lease in ms: a new lock expires after it; a re-entry raises the TTL to it
-- ARGV[2]  writer field <client-uuid>:<owner>:write
-- ARGV[3]  the same owner's reader field <client-uuid>:<owner>
-- ARGV[4]  claim priority: above 0 (a waiting writer), a read-locked lock is claimed for this
--          writer unless another writer claimed it first, so new readers stay out until it has
--          had its turn; 0: claim nothing (a one-shot attempt)
-- ARGV[5]  the claim window in ms (see lua/lock/acquire.lua)
--
-- Reply:   nil when the hold was taken, else how long to wait at most, in ms (the lock's PTTL,
--          -1 when it has none; or what is left of another writer's claim on a free lock).
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type (nothing is written then);
--          RELOCK_UPGRADE when this owner holds
--          the read lock: the write lock waits for every reader, so it would wait for itself.
local name = KEYS[1]
local mode = on_key(1, 'hget', 'mode')
if mode == 'read' and redis.call('hexists', name, ARGV[3]) == 1 then
    if rw_alive(name, ARGV[3]) then
        return redis.error_reply('RELOCK_UPGRADE the owner holds the read lock')
    end
    -- The claim is read below, after this write: its type is checked first.
    claim_check(2)
    rw_drop(name, ARGV[3])
    if redis.call('hlen', name) == 1 then
        redis.call('del', name)
        mode = false
    end
end
if mode == false and redis.call('exists', name) == 0 then
    local wait = claim_pass(2, ARGV[2], ARGV[5])
    if wait then
        return wait
    end
    redis.call('hset', name, 'mode', 'write', ARGV[2], 1)
    redis.call('pexpire', name, ARGV[1])
    return nil
end
if mode == 'write' and redis.call('hexists', name, ARGV[2]) == 1 then
    redis.call('hincrby', name, ARGV[2], 1)
    lease_raise(name, ARGV[1])
    return nil
end
local ttl = redis.call('pttl', name)
local priority = tonumber(ARGV[4])
if priority > 0 and mode == 'read' then
    claim_take(2, priority, ARGV[2], ttl, ARGV[5])
end
return ttl
