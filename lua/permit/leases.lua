-- A permit semaphore's leases: the sorted set {<name>}:timeout of permit ids (16 raw bytes)
-- scored by the moment each permit's lease ends, in epoch ms. Redisson scores the permits it
-- takes without a lease 922337203685477, which never comes. relock reads the moment from the
-- server's clock (TIME); Redisson from its own, so a fleet that mixes both should keep its
-- clocks in step.

-- The server's clock in ms.
local function now_ms()
    local t = redis.call('time')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Gives back every permit whose lease ended by `now`: removes it from the leases KEYS[leases],
-- adds it to the counter `counter`, and publishes the count on `channel` with `publish` when it
-- is above 0, as Redisson's scripts do. Returns how many were given back. Its first command
-- checks the leases' type (see common/counter.lua), so it needs that fragment.
local function leases_reclaim(counter, leases_i, channel, publish, now)
    local leases = KEYS[leases_i]
    local ended = on_key(leases_i, 'zrangebyscore', 0, now)
    if #ended == 0 then
        return 0
    end
    for i = 1, #ended, 1000 do
        redis.call('zrem', leases, unpack(ended, i, math.min(i + 999, #ended)))
    end
    local count = redis.call('incrby', counter, #ended)
    if count > 0 then
        redis.call(publish, channel, count)
    end
    return #ended
end
