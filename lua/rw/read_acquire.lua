-- Take a read hold of a read-write lock (Redisson's RReadWriteLock read lock).
-- Needs: common/counter, common/claim, common/lease, rw/readers
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the hand-off claim relock_claim:{<name>}: "<priority>:<writer field>" of a writer
--          that waits; while it lives, new readers stay out (writers are not starved)
-- ARGV[1]  lease in ms: the hold's timeout key gets it; the lock's TTL is raised to it
-- ARGV[2]  reader field <client-uuid>:<owner>
-- ARGV[3]  the same owner's writer field <client-uuid>:<owner>:write
-- ARGV[4]  the claim window in ms (see lua/lock/acquire.lua)
--
-- Reply:   nil when the hold was taken, else how long to wait at most, in ms (the lock's PTTL,
--          -1 when it has none; or what is left of a writer's claim on a free lock).
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type; nothing is written then.
--
-- Taken when: the lock is free and no other writer claimed it; or it is read-locked and this
-- reader holds it already (a re-entry never waits) or no writer waits; or this owner holds the
-- write lock (a downgrade). A hash without `mode` is another lock type's: busy.
local name = KEYS[1]
local mode = on_key(1, 'hget', 'mode')
if redis.call('hexists', name, ARGV[2]) == 1 and not rw_alive(name, ARGV[2]) then
    -- This reader's holds all lapsed: it starts afresh, and may leave nothing behind. The claim
    -- is read below, after this write: its type is checked first.
    claim_check(2)
    rw_drop(name, ARGV[2])
    if mode == 'read' and redis.call('hlen', name) == 1 then
        redis.call('del', name)
        mode = false
    end
end
if mode == false then
    if redis.call('exists', name) == 1 then
        return redis.call('pttl', name)
    end
    local _, claimant = claim_read(2)
    if claimant and claimant ~= ARGV[3] then
        return claim_wait(KEYS[2], ARGV[4])
    end
    redis.call('hset', name, 'mode', 'read')
elseif mode == 'read' then
    if redis.call('hexists', name, ARGV[2]) == 0 then
        local _, claimant = claim_read(2)
        if claimant and claimant ~= ARGV[3] then
            return redis.call('pttl', name)
        end
    end
elseif redis.call('hexists', name, ARGV[3]) == 0 then
    return redis.call('pttl', name)
end
local n = redis.call('hincrby', name, ARGV[2], 1)
redis.call('set', rw_timeouts(name, ARGV[2]) .. ':' .. n, 1, 'px', ARGV[1])
lease_raise(name, ARGV[1])
return nil
