-- A lease is extended, never shortened: another hold of the same owner may need longer.

-- Raises the TTL of `key` to `ms` when it is shorter (or when `key` has none).
local function lease_raise(key, ms)
    if redis.call('pttl', key) < tonumber(ms) then
        redis.call('pexpire', key, ms)
    end
end

