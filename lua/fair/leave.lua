-- A waiter gives up (timed out, cancelled, failed): remove it from the queue, and wake the next
-- head if it was the head of a free lock's queue.
-- Needs: common/counter, fair/queue
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the queue redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines redisson_lock_timeout:{<name>}
-- KEYS[4]  the waiters' channel prefix redisson_lock__channel:{<name>}
-- ARGV[1]  holder field <client-uuid>:<owner> of the waiter
-- ARGV[2]  the publish command: PUBLISH (or SPUBLISH)
-- ARGV[3]  the message to publish ("0")
--
-- Reply:   1 when the field was queued (in the queue or the deadlines), 0 when it was not.
-- Errors:  WRONGTYPE ... [key <i>] when the queue or the deadlines hold another type; nothing
--          is written then.
--
-- The others' deadlines are left as they are. Dead heads are dropped as lua/fair/queue.lua says.

-- `now` and `live_head()` come from lua/fair/queue.lua, which is prepended to this script.

-- The queue and the deadlines are each read (or, for the deadlines, written by a ZREM that fails
-- on another type without writing) before anything else is written.
local first = on_key(2, 'lindex', 0)
local queued = on_key(3, 'zrem', ARGV[1])
queued = queued + redis.call('lrem', KEYS[2], 0, ARGV[1])
local head = live_head()
-- The leaver headed the queue of a free lock: the new head may take it now.
if first == ARGV[1] and head and redis.call('exists', KEYS[1]) == 0 then
    redis.call(ARGV[2], KEYS[4] .. ':' .. head, ARGV[3])
end
return math.min(queued, 1)
