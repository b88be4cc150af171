-- Release one write hold of a read-write lock. The writer's last release frees the lock, or,
-- when the writer also took read holds, turns it into a read lock (a downgrade); either way it
-- wakes every waiter, since readers may now come in.
-- Needs: common/counter, common/claim, common/replay, rw/readers
-- Flags: allow-oom
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the wake-up channel redisson_rwlock:{<name>}
-- KEYS[3]  the replay key redisson_unlock_latch:{<name>}:<request-id>
-- KEYS[4]  the hand-off claim relock_claim:{<name>}
-- ARGV[1]  the message published ("1", Redisson's write unlock: wake every waiter)
-- ARGV[2]  the TTL in ms the writer's remaining holds need; 0 when no write hold of the owner's
--          may remain: the writer's field goes whatever its count (as lua/lock/release.lua)
-- ARGV[3]  writer field <client-uuid>:<owner>:write
-- ARGV[4]  the publish command: PUBLISH or SPUBLISH
-- ARGV[5]  how long the replay key lives, in ms
-- ARGV[6]  the claim window in ms: once the lock is free, a claim lives this long at most
-- ARGV[7]  1 when this request may have reached the server before: its replay key is read first
--
-- Reply:   nil when this writer holds nothing, 0 when write holds remain, 1 + n when the write
--          lock was released (freed, or downgraded to the writer's read holds) and its wake-up
--          reached n subscribed connections. A replay key is always written.
-- Errors:  WRONGTYPE when <name> exists but is not a hash.
local name = KEYS[1]
local replayed, reply = replay_read(3, ARGV[7])
if replayed then
    return reply
end
if redis.call('hget', name, 'mode') ~= 'write' or redis.call('hexists', name, ARGV[3]) == 0 then
    return nil
end
local count = 0
if ARGV[2] ~= '0' then
    count = redis.call('hincrby', name, ARGV[3], -1)
end
if count > 0 then
    redis.call('pexpire', name, math.max(tonumber(ARGV[2]), rw_readers_ttl(name)))
    replay_write(KEYS[3], 0, ARGV[5])
    return 0
end
redis.call('hdel', name, ARGV[3])
local longest = rw_readers_ttl(name)
if longest > 0 then
    redis.call('hset', name, 'mode', 'read')
    redis.call('pexpire', name, longest)
else
    rw_delete(name)
    claim_cut(KEYS[4], ARGV[6])
end
local woken = redis.call(ARGV[4], KEYS[2], ARGV[1])
replay_write(KEYS[3], 1, ARGV[5])
return 1 + woken
