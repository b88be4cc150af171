-- Extend the lease of many locks with a lock-delay at once, each only if its holder field is
-- still there, and its shadow lease with it: the shadow then outlives the lock by the delay it
-- names. As lua/lock/renew.lua otherwise: never creates a lock, never shortens one.
-- Needs: common/counter, common/lease, common/delay
-- Flags: allow-oom
--
-- KEYS[2i-1]  the lock hash of lock i (all in one cluster slot)
-- KEYS[2i]    its shadow lease relock_lease:{<name>}: "<delay ms>:<holder field>"
--             (lua/common/delay.lua); one that is gone or of another type is left alone
-- ARGV[1]     lease in ms: the TTL is raised to it when shorter
-- ARGV[i+1]   holder field of lock i
--
-- Reply:      an array with, for each lock in order, 1 when renewed and 0 when the field is gone
--             (expired, force-released, or the key now holds another type).
local renewed = {}
for i = 1, #KEYS / 2 do
    local lock, shadow = KEYS[2 * i - 1], KEYS[2 * i]
    local held = redis.pcall('hexists', lock, ARGV[i + 1])
    if held == 1 then
        lease_raise(lock, ARGV[1])
        local value = redis.pcall('get', shadow)
        local delay = type(value) == 'string' and delay_of(value)
        if delay then
            redis.call('pexpire', shadow, redis.call('pttl', lock) + delay)
        end
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
