-- Extends the leases of many permits at once (the watchdog's renewal of live permits).
-- Needs: common/counter, permit/leases
-- Flags: allow-oom
--
-- KEYS[i]  the leases {<name>}:timeout of the i-th permit's semaphore
-- ARGV[1]  the lease in ms: each renewed permit's lease ends this long after the server's now
-- ARGV[1+i] the i-th permit's id: 16 raw bytes
--
-- A permit is renewed only while it is in its leases and its lease has not ended: one that
-- ended is the next acquire's to reclaim, and is never brought back.
-- Reply:   one entry per permit, in order: 1 when renewed, 0 when not (also when its leases key
--          holds another type).
local now = now_ms()
local lease = tonumber(ARGV[1])
local renewed = {}
for i, leases in ipairs(KEYS) do
    -- A key of another type is not renewed (and fails nothing: the others were renewed already).
    local score = redis.pcall('zscore', leases, ARGV[i + 1])
    if type(score) == 'string' and tonumber(score) > now then
        redis.call('zadd', leases, 'xx', now + lease, ARGV[i + 1])
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
