-- The fair lock's queue, as every fair script sees it. Prepended to each script in lua/fair/
-- (the catalogue, src/scripts/catalogue.rs, joins them), so the rules for deadlines and dead
-- waiters are written once.
--
-- KEYS[2]  the queue redisson_lock_queue:{<name>}: LIST of waiting holder fields, in FIFO order
-- KEYS[3]  the deadlines redisson_lock_timeout:{<name>}: ZSET waiting field -> epoch ms after
--          which it counts as dead, by Redisson's arithmetic (below)
-- KEYS[a]  relock's liveness record relock_fair_alive:{<name>} (its place in KEYS is each
--          script's own, passed to these functions as `a`): ZSET relock waiter -> epoch ms
--          after which it counts as dead, its last run + relock's fair waiter timeout.
--          Redisson never reads it. The key lives W past the latest deadline of a relock waiter
--          it records, so a lapsed entry is still there while its field could be queued.
--
-- The deadlines follow Redisson's arithmetic, with Q its per-waiter wait (fairLockWaitTimeout,
-- 300 s by default): a waiter that queues gets the deadline of the tail before it (or now + the
-- lock's PTTL when nobody queues) + Q; whoever takes the lock lowers every deadline left by Q,
-- and a waiter that leaves lowers those behind it by Q. So a waiter's deadline stays its
-- predecessor's + Q whoever's scripts move the queue, and Redisson's purge (deadline passed)
-- drops nobody who is still expected. relock's own liveness is the separate record, so a dead
-- relock waiter still goes within relock's timeout; a live one also keeps its deadline at least
-- max(Q, W) past its last run, so a long hold never makes it pass.
--
-- `now()` is the server's clock in ms (`TIME`, read once per run and kept in `CALL`, the run's
-- own table, and only by a run that needs it: an uncontended acquire or release does not):
-- every deadline relock writes is on it.
-- `live_head(a)` drops dead heads, as many as there are in a row, and returns the live head, or
-- nil. A head is dead when its deadline has passed, when it has none at all (debris: a list
-- entry without a deadline could otherwise hold the queue forever), or when its liveness record
-- has passed (a relock waiter that stopped running). Only the head is ever dropped, and the
-- others' deadlines are left as they are then (as Redisson's purge does).
-- Its reads go through `on_key` (lua/common/counter.lua, which each fair script needs before
-- this file): a key of another type fails the script, named, and before `live_head()` writes; a
-- script that writes before calling it checks those keys first.

local function now()
    if not CALL.clock then
        local t = redis.call('time')
        CALL.clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    return CALL.clock
end

-- When `field` (queued) counts as dead at the latest: its deadline, or its liveness record if
-- that comes first; nil when it has no deadline.
local function dead_at(field, a)
    -- Both read before `live_head()` writes, so either of another type fails with nothing done.
    local deadline = on_key(3, 'zscore', field)
    local beat = on_key(a, 'zscore', field)
    if not deadline then
        return nil
    end
    deadline = tonumber(deadline)
    if beat and tonumber(beat) < deadline then
        return tonumber(beat)
    end
    return deadline
end

local function live_head(a)
    while true do
        local head = on_key(2, 'lindex', 0)
        if not head then
            return nil
        end
        local dead = dead_at(head, a)
        if dead and dead > now() then
            return head
        end
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], head)
        redis.call('zrem', KEYS[a], head)
    end
end

-- Lowers the deadline of every waiter in `fields` by `q` (Redisson's shift on a dequeue).
local function lower(fields, q)
    for i = 1, #fields do
        redis.call('zincrby', KEYS[3], -q, fields[i])
    end
end

