-- Takes one permit of a permit semaphore, with a lease (Redisson's RPermitExpirableSemaphore
-- tryAcquire: the same keys, ids and scores).
-- Needs: common/counter, permit/leases
--
-- KEYS[1]  the counter <name>: available permits
-- KEYS[2]  the leases {<name>}:timeout (see permit/leases.lua)
-- KEYS[3]  the wake-up channel redisson_sc:{<name>}
-- ARGV[1]  the lease in ms
-- ARGV[2]  the new permit's id: 16 raw bytes
-- ARGV[3]  the publish command: PUBLISH or SPUBLISH
-- ARGV[4]  the score of a permit without a lease, 922337203685477
--
-- First gives back the permits whose lease has ended (publishing the count, as Redisson does).
-- When one is available, takes it: the id goes into the leases, scored the server's now plus
-- the lease, and the leases take the counter's TTL when it has one (as Redisson's script does).
-- Reply:   {1, available after} when taken; {0, ms} when none is available, where ms is how
--          long until the earliest lease ends (-1: no permit with a lease is out); nil when the
--          counter does not exist (its permits were never set).
-- Errors:  WRONGTYPE ... [key <i>] when a key holds another type; nothing is written then.
local available = counter_read(1)
if not available then
    return nil
end
local now = now_ms()
available = available + leases_reclaim(KEYS[1], 2, KEYS[3], ARGV[3], now)
if available < 1 then
    local earliest = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
    if earliest[2] and earliest[2] ~= ARGV[4] then
        return {0, math.max(tonumber(earliest[2]) - now, 0)}
    end
    return {0, -1}
end
local left = redis.call('decr', KEYS[1])
redis.call('zadd', KEYS[2], now + tonumber(ARGV[1]), ARGV[2])
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
end
return {1, left}
