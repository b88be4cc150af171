-- Delete a fair lock whoever holds it, and wake the head of the queue on its own channel.
-- Needs: common/counter, common/hash, fair/queue
-- Flags: allow-oom
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the queue redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines redisson_lock_timeout:{<name>}
-- KEYS[4]  the waiters' channel prefix redisson_lock__channel:{<name>}
-- KEYS[5]  relock's liveness record relock_fair_alive:{<name>} (lua/fair/queue.lua)
-- KEYS[6]  (optional) the lock-delay's shadow lease relock_lease:{<name>} (lua/common/delay.lua):
--          deleted, so a force-unlock frees the name at once, ending any lock-delay in force
-- ARGV[1]  the message to publish ("0")
-- ARGV[2]  the publish command: PUBLISH (or SPUBLISH)
--
-- Reply:   1 when a lock was deleted, or when, the lock being gone, a lock-delay in force was
--          ended; 0 when there was neither.
-- Errors:  WRONGTYPE when <name> holds another type: a user's string is never deleted.
--
-- The queue keeps its waiters; dead heads are dropped as lua/fair/queue.lua says.

-- `now()` and `live_head()` come from lua/fair/queue.lua, `hash_type()` from lua/common/hash.lua.

local kind, wrong = hash_type(KEYS[1])
if wrong then
    return wrong
end
local shadow = KEYS[6] and on_key(6, 'strlen') and KEYS[6]
if kind == 'none' and not (shadow and redis.call('pttl', shadow) > 0) then
    return 0
end
local head = live_head(5)
redis.call('del', KEYS[1])
if shadow then
    redis.call('del', shadow)
end
if head then
    redis.call(ARGV[2], KEYS[4] .. ':' .. head, ARGV[1])
end
return 1
