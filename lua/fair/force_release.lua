-- Delete a fair lock whoever holds it, and wake the head of the queue on its own channel.
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the queue redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines redisson_lock_timeout:{<name>}
-- KEYS[4]  the waiters' channel prefix redisson_lock__channel:{<name>}
-- ARGV[1]  the message to publish ("0")
-- ARGV[2]  the publish command: PUBLISH (or SPUBLISH)
--
-- Reply:   1 when a lock was deleted, 0 when there was none.
-- Errors:  WRONGTYPE when <name> holds another type: a user's string is never deleted.
--
-- The queue keeps its waiters; dead heads are dropped as fair_queue.lua says.

-- `now` and `live_head()` come from fair_queue.lua, which is prepended to this script.

local head = live_head()
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
redis.call('del', KEYS[1])
if head then
    redis.call(ARGV[2], KEYS[4] .. ':' .. head, ARGV[1])
end
return 1
