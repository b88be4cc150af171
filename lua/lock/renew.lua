-- Extend the lease of many locks at once, each only if its holder field is still there.
-- Never creates a lock: a lock that is gone stays gone. Never shortens one either: a fixed hold
-- of the same owner may need longer than the watchdog lease.
-- Needs: common/lease
-- Flags: allow-oom
--
-- KEYS[i]    the lock hash of lock i (all in one cluster slot)
-- ARGV[1]    lease in ms: the TTL is raised to it when shorter
-- ARGV[i+1]  holder field of lock i
--
-- Reply:     an array with, for each lock in KEYS order, 1 when renewed and 0 when the field is gone
--            (expired, force-released, or the key now holds another type).
local renewed = {}
for i = 1, #KEYS do
    local held = redis.pcall('hexists', KEYS[i], ARGV[i + 1])
    if held == 1 then
        lease_raise(KEYS[i], ARGV[1])
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
