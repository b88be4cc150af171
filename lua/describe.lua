-- Read everything relock and Redisson keep under one name, in one consistent step, writing nothing
-- (`Client::inspect`, the `relock` command line).
-- Needs: rw/readers
-- Flags: no-writes
--
-- KEYS[1]  <name>: a lock hash, or a semaphore's or latch's count
-- KEYS[2]  the fair queue redisson_lock_queue:{<name>}
-- KEYS[3]  the fair deadlines redisson_lock_timeout:{<name>}
-- KEYS[4]  the fencing-token counter redisson_lock_token:{<name>}
-- KEYS[5]  the lock-delay's shadow lease relock_lease:{<name>}
-- KEYS[6]  a permit semaphore's leases {<name>}:timeout
--
-- Reply:   {type, pttl, size, fields, value, queue, queue_len, deadlines, token, delay_pttl,
--          leases_len, leases, now_ms, live_readers}
--   type        the Redis type of <name> ("none", "hash", "string", ...)
--   pttl        <name>'s PTTL (-2 gone, -1 no expiry)
--   size        HLEN of a hash, STRLEN of a string, else 0
--   fields      a hash's fields and values, flat, when it has at most 1,000 fields (else empty)
--   value       a string of at most 32 bytes (else false)
--   queue       the first 100 fair waiters' fields, first come first
--   queue_len   the queue's length
--   deadlines   each of those waiters' deadline (epoch ms, server clock), false when it has none
--   token       the fencing-token counter, false when there is none
--   delay_pttl  the shadow lease's PTTL (-2: no lock-delay)
--   leases_len  a permit semaphore's lease count
--   leases      its first 100 leases, flat: permit id, deadline (epoch ms)
--   now_ms      the server's clock
--   live_readers a read-write lock's reader fields that still hold (a timeout key lives)
-- A key of another type under an auxiliary name is read as absent: it is not relock's.
local function typed(key, want)
    return redis.call('type', key)['ok'] == want
end

local kind = redis.call('type', KEYS[1])['ok']
local size, fields, value = 0, {}, false
local live_readers = {}
if kind == 'hash' then
    size = redis.call('hlen', KEYS[1])
    if size <= 1000 then
        fields = redis.call('hgetall', KEYS[1])
        if redis.call('hget', KEYS[1], 'mode') then
            for i = 1, #fields, 2 do
                local field = fields[i]
                if field ~= 'mode' and not rw_is_writer(field) and rw_alive(KEYS[1], field) then
                    live_readers[#live_readers + 1] = field
                end
            end
        end
    end
elseif kind == 'string' then
    size = redis.call('strlen', KEYS[1])
    if size <= 32 then
        value = redis.call('get', KEYS[1])
    end
end

local queue, queue_len, deadlines = {}, 0, {}
if typed(KEYS[2], 'list') then
    queue = redis.call('lrange', KEYS[2], 0, 99)
    queue_len = redis.call('llen', KEYS[2])
    local scored = typed(KEYS[3], 'zset')
    for i, field in ipairs(queue) do
        deadlines[i] = scored and redis.call('zscore', KEYS[3], field) or false
    end
end

local token = typed(KEYS[4], 'string') and redis.call('get', KEYS[4]) or false
local delay_pttl = typed(KEYS[5], 'string') and redis.call('pttl', KEYS[5]) or -2

local leases_len, leases = 0, {}
if typed(KEYS[6], 'zset') then
    leases_len = redis.call('zcard', KEYS[6])
    leases = redis.call('zrange', KEYS[6], 0, 99, 'WITHSCORES')
end

local time = redis.call('time')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

return {kind, redis.call('pttl', KEYS[1]), size, fields, value, queue, queue_len, deadlines,
    token, delay_pttl, leases_len, leases, now_ms, live_readers}
