-- Acquire a fair lock, or count one more hold for its owner. A waiter that finds it busy queues
-- up at the tail, or, queued already, proves it is alive.
-- Needs: common/counter, common/lease, common/delay, fair/queue
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the queue redisson_lock_queue:{<name>}: LIST of waiting holder fields, in FIFO order
-- KEYS[3]  the deadlines redisson_lock_timeout:{<name>}: ZSET waiting field -> epoch ms after
--          which it counts as dead (Redisson's arithmetic, see lua/fair/queue.lua)
-- KEYS[4]  relock's liveness record relock_fair_alive:{<name>}: ZSET relock waiter -> epoch ms
--          after which it counts as dead (its last run + W)
-- ARGV[1]  lease in ms: a new lock expires after it; a re-entry extends the TTL to it when
--          shorter and never shortens it (another hold of the owner may need more)
-- ARGV[2]  holder field <client-uuid>:<owner>
-- ARGV[3]  W, the waiter timeout in ms: a relock waiter that has not run this script for W is
--          dead
-- ARGV[4]  "wait": when busy, queue at the tail, or, queued already, renew the liveness record
--          to now + W and keep the deadline at least now + max(Q, W) (never lower it); "try":
--          never queue, and leave an entry this field may have as it is
-- ARGV[5]  Q, Redisson's per-waiter wait in ms (fairLockWaitTimeout): a new waiter's deadline is
--          the tail's + Q, and a taker lowers the deadlines left by Q
-- KEYS[5]  (a lock with a lock-delay only) the shadow lease relock_lease:{<name>}
--          (lua/common/delay.lua): a free lock whose shadow lives is in its lock-delay, taken by
--          nobody, its queue kept; a hold taken or re-entered sets it to outlive the lock by ARGV[6]
-- ARGV[6]  (with KEYS[5]) the lock-delay in ms; "" for none when ARGV[7] follows
-- ARGV[7]  (optional) "refuse": the owner's re-entry is refused (Redisson's non-reentrant fair
--          lock): a holder field that holds the lock already gets the error
--          NON_REENTRANT_REACQUIRE (returned, so what the purge of dead heads did stays, as in
--          Redisson's), never queues, and changes nothing else; else it re-enters
--
-- Reply:   nil when the hold was taken (new hold or re-entry); else the longest the waiter may
--          sleep before running this again (heartbeats aside), in ms, >= 1 or -1: when this field
--          heads the queue, or nobody queues, the lock's PTTL (-1: it has no expiry); behind
--          another waiter, when that waiter may be dropped as dead - now, also when the lock is
--          free: never 0, so a waiter behind a dead head never busy-polls; or, with KEYS[5],
--          {ms, 'delayed'} when the lock is free but in its lock-delay and this field heads the
--          queue (or nobody queues): ms is what is left of the delay.
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type (or <name> holds this field
--          with a count that is not a number); nothing is written then.
--
-- Only the head of the queue is ever dropped, as lua/fair/queue.lua says. A "wait" renews the
-- caller before that purge, so a late but live waiter keeps its place if its own run comes
-- first.

-- `now()`, `dead_at()`, `live_head()` and `lower()` come from lua/fair/queue.lua,
-- `lease_raise()` from lua/common/lease.lua.
local me = ARGV[2]
local w = tonumber(ARGV[3])
local q = tonumber(ARGV[5])
-- The deadline a live relock waiter keeps at least: a run's now + max(Q, W).
local function least_deadline()
    return now() + math.max(q, w)
end

local waiting = ARGV[4] == 'wait'
-- Each key is read before the first write (Redis keeps a script's writes made before an error),
-- so one of another type fails the script, named, with nothing changed.
local delay = KEYS[5] and ARGV[6] ~= '' and ARGV[6] or nil
if delay then
    delay_check(5)
end
local free = on_key(1, 'hlen') == 0
local delayed = free and delay and delay_left(5) or 0
local holds = not free and redis.call('hget', KEYS[1], me)
if holds then
    hold_count_check(1, holds)
end
-- While nobody waits, neither the queue nor its sets exist (the uncontended case): one EXISTS
-- then reads all three.
local queued = redis.call('exists', KEYS[2], KEYS[3], KEYS[4]) > 0
local score, alive = false, false
if queued then
    score = on_key(3, 'zscore', me)
    alive = on_key(4, 'zscore', me)
end
-- Marks this field alive for W more. The record outlives this field's deadline by W: until
-- then a lapsed entry still tells relock the field is dead (an absent one would read as a
-- Redisson waiter's); after it, the field is gone by Redisson's rule anyway.
local function beat(deadline)
    redis.call('zadd', KEYS[4], now() + w, me)
    local keep = math.ceil(deadline - now() + w)
    if redis.call('pttl', KEYS[4]) < keep then
        redis.call('pexpire', KEYS[4], keep)
    end
end
-- A waiter that runs is alive: renew it before the purge, so it never drops itself.
if waiting and score then
    on_key(2, 'llen')
    local deadline = math.max(tonumber(score), least_deadline())
    redis.call('zadd', KEYS[3], deadline, me)
    beat(deadline)
end
local head = queued and live_head(4) or nil
-- Free, and nobody queues ahead of this field: take it, and everyone left moves up one place.
if free and delayed == 0 and (not head or head == me) then
    if head then
        redis.call('lpop', KEYS[2])
    end
    -- Only what is there is removed, and the deadlines are lowered only behind a head that
    -- leaves: an uncontended acquire (no queue, not queued) writes nothing but the lock.
    if score then
        redis.call('zrem', KEYS[3], me)
    end
    if alive or score then
        redis.call('zrem', KEYS[4], me)
    end
    if head then
        lower(redis.call('zrange', KEYS[3], 0, -1), q)
    end
    redis.call('hset', KEYS[1], me, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if delay then
        delay_extend(5, KEYS[1], me, delay)
    end
    return nil
end
-- Re-entry: one more hold, and a TTL raised to the lease, never lowered.
if holds then
    if ARGV[7] == 'refuse' then
        return redis.error_reply('NON_REENTRANT_REACQUIRE')
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    lease_raise(KEYS[1], ARGV[1])
    if delay then
        delay_extend(5, KEYS[1], me, delay)
    end
    return nil
end
-- Busy. A new waiter queues at the tail, its deadline the tail's + Q (Redisson's); one whose
-- list entry is gone (empty queue) re-queues.
if waiting and not score then
    local last = redis.call('lindex', KEYS[2], -1)
    local base = last and redis.call('zscore', KEYS[3], last)
    if base then
        base = tonumber(base)
    else
        base = now() + math.max(0, redis.call('pttl', KEYS[1]))
    end
    local deadline = math.max(base + q, least_deadline())
    redis.call('zadd', KEYS[3], deadline, me)
    beat(deadline)
end
if waiting and (not score or not head) then
    redis.call('rpush', KEYS[2], me)
    head = head or me
end
if head and head ~= me then
    return math.max(1, math.ceil(dead_at(head, 4) - now()))
end
if delayed > 0 then
    return {delayed, 'delayed'}
end
local ttl = redis.call('pttl', KEYS[1])
if ttl == -1 then
    return -1
end
return math.max(1, ttl)
