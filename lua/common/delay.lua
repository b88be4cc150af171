-- Lock-delay: the shadow lease relock_lease:{<name>}, a relock-only STRING
-- "<delay ms>:<holder field>" that outlives the lock hash by the delay. Written only by the
-- acquires, re-entries, renewals and partial releases of a lock whose handle set a lock-delay,
-- deleted by its final release, a shutdown's release and any force-unlock. A lock that is gone
-- while its shadow lives lost its holder without an unlock (its lease ran out): it stays
-- unavailable to relock acquires with a lock-delay until the shadow expires. Redisson never
-- reads it. Needs lua/common/counter.lua before it: the shadow is read with `on_key`, so a key
-- of another type fails the script, naming it, before the script writes.

-- What is left of the lock-delay in the shadow KEYS[i], in ms, or 0 when none is in force (no
-- shadow, or one without an expiry, which relock never writes). Check the key's type first
-- (`delay_check`).
local function delay_left(i)
    local left = redis.call('pttl', KEYS[i])
    if left > 0 then
        return left
    end
    return 0
end

-- Fails the script with a WRONGTYPE naming KEYS[i] unless the shadow is a string or absent.
local function delay_check(i)
    on_key(i, 'strlen')
end

-- Makes the shadow KEYS[i] outlive the lock hash `lock` (which has a TTL) by `delay` ms, for
-- holder `field`.
local function delay_extend(i, lock, field, delay)
    local ttl = redis.call('pttl', lock)
    if ttl > 0 then
        redis.call('set', KEYS[i], delay .. ':' .. field, 'px', ttl + tonumber(delay))
    end
end

-- The delay in ms that shadow text `value` names, or nil when it is not "<delay ms>:<field>".
local function delay_of(value)
    return tonumber(string.match(value, '^([0-9]+):'))
end
