-- Sets a semaphore's permits unless it has some already (Redisson's trySetPermits, for both
-- RSemaphore and RPermitExpirableSemaphore).
-- Needs: common/counter
--
-- KEYS[1]  the counter <name>
-- KEYS[2]  the wake-up channel redisson_sc:{<name>}
-- KEYS[3]  (a permit semaphore only) its leases {<name>}:timeout, checked for its type
-- ARGV[1]  the permits, 0 or more
-- ARGV[2]  the publish command: PUBLISH or SPUBLISH
--
-- Reply:   1 when set (and the permits published, when above 0); 0 when the counter exists.
-- Errors:  WRONGTYPE ... [key <i>] when a key holds another type; nothing is written then.
local count = counter_read(1)
if KEYS[3] then
    zset_check(3)
end
if count then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
if tonumber(ARGV[1]) > 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return 1
