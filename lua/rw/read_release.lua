-- Release one read hold of a read-write lock. The last reader out deletes the lock and wakes
-- its waiters.
-- Needs: common/counter, common/claim, common/replay, rw/readers
-- Flags: allow-oom
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the wake-up channel redisson_rwlock:{<name>}
-- KEYS[3]  the replay key redisson_unlock_latch:{<name>}:<request-id>
-- KEYS[4]  the hand-off claim relock_claim:{<name>}
-- ARGV[1]  the message published when the lock is freed ("0", Redisson's read unlock)
-- ARGV[2]  the lease in ms that this reader's remaining holds need (the client knows each
--          hold's lease; see `src/registry/holds.rs`): their timeout keys get it; 0 when no
--          read hold of the owner's may remain: the reader's field and all its timeout keys go
--          whatever its count (as lua/lock/release.lua)
-- ARGV[3]  reader field <client-uuid>:<owner>
-- ARGV[4]  the publish command: PUBLISH or SPUBLISH
-- ARGV[5]  how long the replay key lives, in ms
-- ARGV[6]  the claim window in ms: once the lock is free, a writer's claim lives this long at most
-- ARGV[7]  1 when this request may have reached the server before: its replay key is read first
--
-- Reply:   nil when this reader holds nothing (never held, released, or its holds all lapsed),
--          0 when the lock is still held (by this reader's other holds or by others), 1 + n
--          when the lock was freed and its wake-up reached n subscribed connections. A replay
--          key is always written, so a retried release counts once.
-- Errors:  WRONGTYPE when <name> exists but is not a hash.
--
-- The lock's TTL then becomes the longest remaining lease among the readers' holds: a reader
-- that left takes its lease with it, and one whose holds lapsed keeps nothing alive.
local name = KEYS[1]
local replayed, reply = replay_read(3, ARGV[7])
if replayed then
    return reply
end
local mode = redis.call('hget', name, 'mode')
if mode == false or not rw_alive(name, ARGV[3]) then
    if mode ~= false and redis.call('hexists', name, ARGV[3]) == 1 then
        rw_drop(name, ARGV[3])
    end
    return nil
end
if ARGV[2] == '0' then
    rw_drop(name, ARGV[3])
else
    local prefix = rw_timeouts(name, ARGV[3])
    local count = redis.call('hincrby', name, ARGV[3], -1)
    redis.call('del', prefix .. ':' .. (count + 1))
    if count > 0 then
        for n = 1, count do
            redis.call('set', prefix .. ':' .. n, 1, 'px', ARGV[2])
        end
    else
        redis.call('hdel', name, ARGV[3])
    end
end
if mode == 'write' then
    -- The owner's write hold keeps the lock, with a TTL that covers its read holds too.
    replay_write(KEYS[3], 0, ARGV[5])
    return 0
end
local longest = rw_readers_ttl(name)
if longest > 0 then
    redis.call('pexpire', name, longest)
    replay_write(KEYS[3], 0, ARGV[5])
    return 0
end
rw_delete(name)
claim_cut(KEYS[4], ARGV[6])
local woken = redis.call(ARGV[4], KEYS[2], ARGV[1])
replay_write(KEYS[3], 1, ARGV[5])
return 1 + woken
