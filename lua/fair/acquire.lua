-- Acquire a fair lock, or count one more hold for its owner. A waiter that finds it busy queues
-- up at the tail, or, queued already, proves it is alive by pushing its deadline on.
-- Needs: common/counter, common/lease, common/delay, fair/queue
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the queue redisson_lock_queue:{<name>}: LIST of waiting holder fields, in FIFO order
-- KEYS[3]  the deadlines redisson_lock_timeout:{<name>}: ZSET waiting field -> epoch ms after
--          which it counts as dead (relock waiters: the server clock at their last run + W)
-- KEYS[4]  (a lock with a lock-delay only) the shadow lease relock_lease:{<name>}
--          (lua/common/delay.lua): a free lock whose shadow lives is in its lock-delay, taken by
--          nobody, its queue kept; a hold taken or re-entered sets it to outlive the lock by ARGV[5]
-- ARGV[1]  lease in ms: a new lock expires after it; a re-entry extends the TTL to it when
--          shorter and never shortens it (another hold of the owner may need more)
-- ARGV[2]  holder field <client-uuid>:<owner>
-- ARGV[3]  W, the waiter timeout in ms: a waiter that has not run this script for W is dead
-- ARGV[4]  "wait": when busy, queue at the tail with deadline now + W, or, queued already, raise
--          the deadline to now + W (never lower it); "try": never queue, and leave an entry this
--          field may have as it is
-- ARGV[5]  (with KEYS[4]) the lock-delay in ms
--
-- Reply:   nil when the hold was taken (new hold or re-entry); else the longest the waiter may
--          sleep before running this again (heartbeats aside), in ms, >= 1 or -1: when this field
--          heads the queue, or nobody queues, the lock's PTTL (-1: it has no expiry); behind
--          another waiter, that waiter's deadline - now (when it may be dropped as dead), also
--          when the lock is free: never 0, so a waiter behind a dead head never busy-polls; or,
--          with KEYS[4], {ms, 'delayed'} when the lock is free but in its lock-delay and this
--          field heads the queue (or nobody queues): ms is what is left of the delay.
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type (or <name> holds this field
--          with a count that is not a number); nothing is written then.
--
-- Only the head of the queue is ever dropped: when its deadline has passed, or when it has no
-- deadline at all (debris). A "wait" raises the caller's deadline before that purge, so a late
-- but live waiter keeps its place if its own run comes first. Deadlines are never shifted when a
-- waiter leaves. Redisson's scripts share these keys: its waiters' deadlines are fixed when they
-- queue (client clock), and a Redisson taker lowers every deadline by its wait; a relock
-- waiter's next "wait" raises its own again.

-- `now` and `live_head()` come from lua/fair/queue.lua, `lease_raise()` from lua/common/lease.lua.
local me = ARGV[2]

local waiting = ARGV[4] == 'wait'
-- Each key is read before the first write (Redis keeps a script's writes made before an error),
-- so one of another type fails the script, named, with nothing changed.
local delay = KEYS[4] and ARGV[5]
if delay then
    delay_check(4)
end
local free = on_key(1, 'hlen') == 0
local delayed = free and delay and delay_left(4) or 0
local holds = not free and redis.call('hget', KEYS[1], me)
if holds then
    hold_count_check(1, holds)
end
local score = on_key(3, 'zscore', me)
-- A waiter that runs is alive: raise its deadline before the purge, so it never drops itself.
if waiting and score then
    on_key(2, 'llen')
    redis.call('zadd', KEYS[3], math.max(tonumber(score), now + tonumber(ARGV[3])), me)
end
local head = live_head()
-- Free, and nobody queues ahead of this field: take it.
if free and delayed == 0 and (not head or head == me) then
    if head then
        redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], me)
    redis.call('hset', KEYS[1], me, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if delay then
        delay_extend(4, KEYS[1], me, delay)
    end
    return nil
end
-- Re-entry: one more hold, and a TTL raised to the lease, never lowered.
if holds then
    redis.call('hincrby', KEYS[1], me, 1)
    lease_raise(KEYS[1], ARGV[1])
    if delay then
        delay_extend(4, KEYS[1], me, delay)
    end
    return nil
end
-- Busy. A new waiter queues at the tail; one whose list entry is gone (empty queue) re-queues.
if waiting and not score then
    redis.call('zadd', KEYS[3], now + tonumber(ARGV[3]), me)
end
if waiting and (not score or not head) then
    redis.call('rpush', KEYS[2], me)
    head = head or me
end
if head and head ~= me then
    return math.max(1, math.ceil(tonumber(redis.call('zscore', KEYS[3], head)) - now))
end
if delayed > 0 then
    return {delayed, 'delayed'}
end
local ttl = redis.call('pttl', KEYS[1])
if ttl == -1 then
    return -1
end
return math.max(1, ttl)
