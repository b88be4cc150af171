-- A waiter gives up (timed out, cancelled, failed): remove it from the queue, move those behind
-- it up one place, and wake the next head if it was the head.
-- Needs: common/counter, fair/queue
-- Flags: allow-oom
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the queue redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines redisson_lock_timeout:{<name>}
-- KEYS[4]  the waiters' channel prefix redisson_lock__channel:{<name>}
-- KEYS[5]  relock's liveness record relock_fair_alive:{<name>} (lua/fair/queue.lua)
-- ARGV[1]  holder field <client-uuid>:<owner> of the waiter
-- ARGV[2]  the publish command: PUBLISH (or SPUBLISH)
-- ARGV[3]  the message to publish ("0")
-- ARGV[4]  Q, Redisson's per-waiter wait in ms: the deadlines of the waiters behind the leaver
--          drop by Q, as Redisson's acquireFailed lowers them
--
-- Reply:   1 when the field was queued (in the queue or the deadlines), 0 when it was not.
-- Errors:  WRONGTYPE ... [key <i>] when the queue, the deadlines or the liveness record hold
--          another type; nothing is written then.
--
-- Dead heads are dropped as lua/fair/queue.lua says.

-- `now()`, `live_head()` and `lower()` come from lua/fair/queue.lua, which is prepended to this
-- script.

-- The keys are each read before anything is written.
local queue = on_key(2, 'lrange', 0, -1)
on_key(3, 'zscore', ARGV[1])
on_key(5, 'zscore', ARGV[1])
local first = queue[1]
local behind = {}
local found = false
for i = 1, #queue do
    if found then
        behind[#behind + 1] = queue[i]
    elseif queue[i] == ARGV[1] then
        found = true
    end
end
lower(behind, tonumber(ARGV[4]))
local queued = redis.call('zrem', KEYS[3], ARGV[1])
queued = queued + redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[5], ARGV[1])
local head = live_head(5)
-- The leaver headed the queue: the new head may take a free lock now, and of a held one it
-- learns the lease that is left. Left asleep, it would wait for its renewal (up to a third of
-- the waiter timeout), told while it queued behind only when the leaver could be dead.
if first == ARGV[1] and head then
    redis.call(ARGV[2], KEYS[4] .. ':' .. head, ARGV[3])
end
return math.min(queued, 1)
