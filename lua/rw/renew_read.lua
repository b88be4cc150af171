-- Extend the leases of many read holds at once: each reader's own timeout keys, and its lock's
-- TTL to cover them. Only a living reader is renewed (one of its timeout keys still there):
-- renewal never brings back a hold that lapsed, and never extends another reader's.
-- Needs: common/hash, common/lease, rw/readers
-- Flags: allow-oom
--
-- KEYS[i]    the lock hash of lock i (all in one cluster slot)
-- ARGV[1]    lease in ms: each timeout key and the lock's TTL are raised to it when shorter
-- ARGV[i+1]  reader field of lock i
--
-- Reply:     an array with, for each lock in KEYS order, 1 when renewed and 0 when the reader
--            holds nothing (released, force-released, lapsed, or the key holds another type).
local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS do
    local name, field = KEYS[i], ARGV[i + 1]
    renewed[i] = 0
    if hash_type(name) == 'hash' and rw_alive(name, field) then
        local prefix = rw_timeouts(name, field)
        for n = 1, tonumber(redis.call('hget', name, field)) do
            local key = prefix .. ':' .. n
            local left = redis.call('pttl', key)
            if left > -2 and left < lease then
                redis.call('pexpire', key, lease)
            end
        end
        lease_raise(name, lease)
        renewed[i] = 1
    end
end
return renewed
