-- Drop every hold of one holder field at once, as its client shuts down, and its place in the
-- queue if it has one; wake the head of the queue if that frees the lock.
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the queue redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines redisson_lock_timeout:{<name>}
-- KEYS[4]  the waiters' channel prefix redisson_lock__channel:{<name>}
-- ARGV[1]  the message to publish ("0")
-- ARGV[2]  holder field <client-uuid>:<owner>
-- ARGV[3]  the publish command: PUBLISH (or SPUBLISH)
--
-- Reply:   0 when the field held nothing, 1 when it was dropped and other fields remain, 2 when
--          dropping it freed the lock.
-- Errors:  WRONGTYPE when <name> exists but is not a hash (nothing is changed then).
--
-- A field that held nothing but headed the queue of a free lock wakes the next head, as
-- fair_leave.lua does. Dead heads are dropped as in fair_acquire.lua.

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Drop dead heads, as many as there are in a row; return the live head, or nil.
local function live_head()
    while true do
        local head = redis.call('lindex', KEYS[2], 0)
        if not head then
            return nil
        end
        local deadline = redis.call('zscore', KEYS[3], head)
        if deadline and tonumber(deadline) > now then
            return head
        end
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], head)
    end
end

-- First, so a wrong type fails before anything is written.
local dropped = redis.call('hdel', KEYS[1], ARGV[2])
local first = redis.call('lindex', KEYS[2], 0)
redis.call('lrem', KEYS[2], 0, ARGV[2])
redis.call('zrem', KEYS[3], ARGV[2])
local head = live_head()
if redis.call('exists', KEYS[1]) == 1 then
    return dropped
end
if head and (dropped == 1 or first == ARGV[2]) then
    redis.call(ARGV[3], KEYS[4] .. ':' .. head, ARGV[1])
end
return dropped * 2
