-- Drop every hold of one holder of a lock hash at once, as its client shuts down (a plain,
-- fair, spin or fenced lock's); wake a waiter if that frees the lock: the lock's waiters on its
-- channel and, when the lock has a fair queue, the queue's first waiter on its own channel.
-- Needs: common/counter, common/claim
-- Flags: allow-oom
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the wake-up channel redisson_lock__channel:{<name>}
-- KEYS[3]  the hand-off claim relock_claim:{<name>}
-- KEYS[4]  the fair queue redisson_lock_queue:{<name>} (a LIST of waiter fields; usually absent)
-- KEYS[5]  the lock-delay's shadow lease relock_lease:{<name>}: deleted when dropping the hold
--          frees the lock (a shutdown's release is a clean one: it imposes no lock-delay)
-- ARGV[1]  the message to publish when the lock is freed ("0")
-- ARGV[2]  holder field <client-uuid>:<owner>
-- ARGV[3]  the publish command: PUBLISH (or SPUBLISH)
-- ARGV[4]  the claim window in ms: a claim lives at most this much longer once the lock is free
--
-- Reply:   0 when the field held nothing (a read-write lock's hash, which has a mode, holds
--          nothing of these types), 1 when it was dropped and the lock is still held, 2 when
--          dropping it freed the lock.
-- Errors:  WRONGTYPE ... [key <i>] when <name> or the queue holds another type; nothing is
--          written then.
local name = KEYS[1]
if on_key(1, 'hget', 'mode') or redis.call('hexists', name, ARGV[2]) == 0 then
    return 0
end
-- The queue is read after the first write below: its type is checked before it.
local first = on_key(4, 'lindex', 0)
if KEYS[5] then
    on_key(5, 'strlen')
end
redis.call('hdel', name, ARGV[2])
if redis.call('exists', name) == 1 then
    return 1
end
if KEYS[5] then
    redis.call('del', KEYS[5])
end
claim_cut(KEYS[3], ARGV[4])
redis.call(ARGV[3], KEYS[2], ARGV[1])
if first then
    redis.call(ARGV[3], KEYS[2] .. ':' .. first, ARGV[1])
end
return 2
