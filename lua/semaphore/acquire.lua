-- Takes permits from a semaphore if it has enough (Redisson's RSemaphore tryAcquire, with a
-- request key added).
-- Needs: common/counter
--
-- KEYS[1]  the counter <name>: available permits
-- KEYS[2]  the request key relock_request:{<name>}:<client-id>:<n>: written with the permits
--          taken, so the client can read back an acquire whose reply was lost and give back the
--          permits of one that was cancelled (semaphore/undo.lua); the client deletes it once
--          the reply is in
-- ARGV[1]  permits to take, at least 1
-- ARGV[2]  how long the request key lives, in ms
--
-- Reply:   {1, available after} when taken; {0, available} when not enough are available
--          (nothing written); nil when the counter does not exist (its permits were never set).
-- Errors:  WRONGTYPE ... [key 1] when <name> is not a counter; nothing is written then.
local available = counter_read(1)
if not available then
    return nil
end
local permits = tonumber(ARGV[1])
if available < permits then
    return {0, available}
end
local left = redis.call('decrby', KEYS[1], permits)
redis.call('set', KEYS[2], permits, 'px', ARGV[2])
return {1, left}
