-- Deletes a semaphore: its counter and, for a permit semaphore, its leases.
-- Needs: common/counter
-- Flags: allow-oom
--
-- KEYS[1]  the counter <name>
-- KEYS[2]  (a permit semaphore only) its leases {<name>}:timeout
--
-- Reply:   1 when there was something to delete, else 0.
-- Errors:  WRONGTYPE ... [key <i>] when a key holds another type: nothing is deleted then.
counter_read(1)
if KEYS[2] then
    zset_check(2)
end
return math.min(redis.call('del', unpack(KEYS)), 1)
