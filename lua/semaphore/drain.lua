-- Takes every available permit of a semaphore at once (Redisson's drainPermits).
-- Needs: common/counter
--
-- KEYS[1]  the counter <name>
--
-- Reply:   the permits that were available (0 when the counter does not exist; negative when
--          it was below 0, which this raises to 0). The counter keeps its TTL.
-- Errors:  WRONGTYPE ... [key 1] when <name> is not a counter; nothing is written then.
local count = counter_read(1)
if not count then
    return 0
end
redis.call('set', KEYS[1], 0, 'keepttl')
return count
