-- Drop every hold of one holder of a read-write lock at once, as its client shuts down: a
-- reader's holds with its timeout keys, or a writer's (its own read holds are another field and
-- stay). Wake the lock's waiters when that frees the lock, or when a writer's leaving turns it
-- into a read lock.
-- Needs: common/counter, common/claim, rw/readers
-- Flags: allow-oom
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the read-write lock's channel redisson_rwlock:{<name>}
-- KEYS[3]  the hand-off claim relock_claim:{<name>}
-- ARGV[1]  holder field: <client-uuid>:<owner> for a reader, <client-uuid>:<owner>:write for a
--          writer
-- ARGV[2]  the publish command: PUBLISH (or SPUBLISH)
-- ARGV[3]  the claim window in ms: a claim lives at most this much longer once the lock is free
--
-- Reply:   0 when the field held nothing (a hash without a mode is no read-write lock's, and
--          holds nothing of these types), 1 when it was dropped and the lock is still held, 2
--          when dropping it freed the lock.
-- Errors:  WRONGTYPE when <name> exists but is not a hash.
local name = KEYS[1]
local mode = redis.call('hget', name, 'mode')
if mode == false or redis.call('hexists', name, ARGV[1]) == 0 then
    return 0
end
if rw_is_writer(ARGV[1]) then
    redis.call('hdel', name, ARGV[1])
    local longest = rw_readers_ttl(name)
    if longest > 0 then
        redis.call('hset', name, 'mode', 'read')
        redis.call('pexpire', name, longest)
        redis.call(ARGV[2], KEYS[2], '1')
        return 1
    end
    rw_delete(name)
else
    rw_drop(name, ARGV[1])
    if mode == 'write' then
        return 1
    end
    local longest = rw_readers_ttl(name)
    if longest > 0 then
        redis.call('pexpire', name, longest)
        return 1
    end
    rw_delete(name)
end
if redis.call('exists', name) == 1 then
    return 1
end
claim_cut(KEYS[3], ARGV[3])
redis.call(ARGV[2], KEYS[2], mode == 'write' and '1' or '0')
return 2
