-- Drop every hold of one holder at once, as its client shuts down; wake a waiter if that frees
-- the lock. Works for every lock type on the lock hash: it wakes the plain lock's waiters on the
-- lock's channel and, when the lock has a fair queue, the first waiter on its own channel; on a
-- read-write lock it also drops a reader's timeout keys, and wakes the lock's waiters when the
-- lock is freed or a writer's leaving turns it into a read lock. Sent after `lua/rw/readers.lua`.
-- Needs: rw/readers
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the wake-up channel redisson_lock__channel:{<name>}
-- KEYS[3]  the hand-off claim relock_claim:{<name>}
-- KEYS[4]  the fair queue redisson_lock_queue:{<name>} (a LIST of waiter fields; usually absent)
-- KEYS[5]  the read-write lock's channel redisson_rwlock:{<name>}
-- ARGV[1]  the message to publish when the lock is freed ("0")
-- ARGV[2]  holder field <client-uuid>:<owner> (a read-write lock's writer: ...:<owner>:write)
-- ARGV[3]  the publish command: PUBLISH (or SPUBLISH)
-- ARGV[4]  the claim window in ms: a claim lives at most this much longer once the lock is free
--
-- Reply:   0 when the field held nothing, 1 when it was dropped and the lock is still held, 2
--          when dropping it freed the lock.
-- Errors:  WRONGTYPE when <name> exists but is not a hash.
local name = KEYS[1]
local mode = redis.call('hget', name, 'mode')
if redis.call('hexists', name, ARGV[2]) == 0 then
    return 0
end
if mode == false then
    redis.call('hdel', name, ARGV[2])
elseif rw_is_writer(ARGV[2]) then
    redis.call('hdel', name, ARGV[2])
    local longest = rw_readers_ttl(name)
    if longest > 0 then
        redis.call('hset', name, 'mode', 'read')
        redis.call('pexpire', name, longest)
        redis.call(ARGV[3], KEYS[5], '1')
        return 1
    end
    rw_delete(name)
else
    rw_drop(name, ARGV[2])
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
if redis.call('pttl', KEYS[3]) > tonumber(ARGV[4]) then
    redis.call('pexpire', KEYS[3], ARGV[4])
end
if mode ~= false then
    redis.call(ARGV[3], KEYS[5], mode == 'write' and '1' or '0')
    return 2
end
redis.call(ARGV[3], KEYS[2], ARGV[1])
local first = redis.call('lindex', KEYS[4], 0)
if first then
    redis.call(ARGV[3], KEYS[2] .. ':' .. first, ARGV[1])
end
return 2
