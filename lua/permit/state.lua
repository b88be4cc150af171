-- Reads a permit semaphore's permits, after giving back those whose lease has ended (Redisson's
-- availablePermits, acquiredPermits and getPermits do the same).
-- Needs: common/counter, permit/leases
--
-- KEYS[1]  the counter <name>
-- KEYS[2]  the leases {<name>}:timeout
-- KEYS[3]  the wake-up channel redisson_sc:{<name>}
-- ARGV[1]  the publish command: PUBLISH or SPUBLISH
--
-- Reply:   {available, acquired}; available is nil when the counter does not exist.
-- Errors:  WRONGTYPE ... [key <i>] when a key holds another type; nothing is written then.
local available = counter_read(1)
if available then
    available = available + leases_reclaim(KEYS[1], 2, KEYS[3], ARGV[1], now_ms())
else
    zset_check(2)
end
return {available, redis.call('zcard', KEYS[2])}
