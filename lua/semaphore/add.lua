-- Adds permits to a semaphore, or takes them away (Redisson's addPermits).
-- Needs: common/counter
--
-- KEYS[1]  the counter <name> (a missing one counts as 0)
-- KEYS[2]  the wake-up channel redisson_sc:{<name>}
-- KEYS[3]  (a permit semaphore only) its leases {<name>}:timeout, checked for its type
-- ARGV[1]  how many to add: a whole number, negative to take permits away
-- ARGV[2]  the publish command: PUBLISH or SPUBLISH
--
-- Publishes the count after it when above 0: a Redisson waiter wakes up to that many, so it
-- is at least the number added (Redisson's permit semaphore publishes the number added).
-- Reply:   the count after it.
-- Errors:  WRONGTYPE ... [key <i>] when a key holds another type; nothing is written then.
if KEYS[3] then
    zset_check(3)
end
local count = on_key(1, 'incrby', ARGV[1])
if count > 0 then
    redis.call(ARGV[2], KEYS[2], count)
end
return count
