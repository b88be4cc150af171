-- Release one hold of a fair lock; the last hold deletes the lock and wakes the head of the queue
-- on its own channel.
-- Needs: common/counter, common/replay, common/delay, fair/queue
-- Flags: allow-oom
--
-- A release that leaves holds behind writes a replay key, so that its retry after a lost reply
-- does not count it twice. The last release writes one only when ARGV[8] asks, as the plain
-- lock's does (lua/lock/release.lua): its retry finds the field gone and returns nil, which the
-- client takes for "freed by the first send", and the client asks for the key whenever that
-- could be wrong. A retry that finds the field gone moves nothing: it wakes the head only if
-- the lock is still free, which at worst wakes the head once more.
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the queue redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines redisson_lock_timeout:{<name>}
-- KEYS[4]  the waiters' channel prefix redisson_lock__channel:{<name>}: the head is woken on
--          <prefix>:<its field>
-- KEYS[5]  the replay key redisson_unlock_latch:{<name>}:<request-id>
-- KEYS[6]  relock's liveness record relock_fair_alive:{<name>} (lua/fair/queue.lua)
-- KEYS[7]  (a lock with a lock-delay only) the shadow lease relock_lease:{<name>}
--          (lua/common/delay.lua): a release that leaves holds sets it to outlive the lock by
--          ARGV[7]; the last release deletes it (a clean release imposes no delay)
-- ARGV[1]  the message to publish ("0")
-- ARGV[2]  the TTL in ms to set while holds remain; 0 when no hold of the owner's may remain:
--          the release frees the lock whatever the field's count (as lua/lock/release.lua)
-- ARGV[3]  holder field <client-uuid>:<owner>
-- ARGV[4]  the publish command: PUBLISH (or SPUBLISH)
-- ARGV[5]  how long a replay key lives, in ms
-- ARGV[6]  1 when this request may have reached the server before: its replay key is read
--          first; 0 on the request's first send
-- ARGV[7]  the lock-delay in ms (used with KEYS[7] only; 0 without)
-- ARGV[8]  1 when the last release writes its replay key too; 0: only a release that leaves
--          holds behind writes one
--
-- Reply:   nil when the field holds nothing, 0 when holds remain, 1 + n when the lock was freed
--          and the head's wake-up reached n subscribed connections (n = 0 without a queue). A
--          request whose replay key exists replays 0 or 1.
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type (or <name> holds this field
--          with a count that is not a number); nothing is written then.
--
-- A field that holds nothing still wakes the head if the lock has gone (it expired): the head
-- may take it now rather than when its own timer fires. Dead heads are dropped as
-- lua/fair/queue.lua says. A release moves no deadline (nobody left the queue), as Redisson's.

local replayed, reply = replay_read(5, ARGV[6])
if replayed then
    return reply
end

-- `now` and `live_head()` come from lua/fair/queue.lua, the replay key's rules from
-- lua/common/replay.lua.

-- The lock is read before `live_head()` may write (drop dead heads), so a lock of another type,
-- or a hold count that is not a number, fails the script with nothing changed.
local holds = on_key(1, 'hget', ARGV[3])
if holds then
    hold_count_check(1, holds)
end
if KEYS[7] then
    delay_check(7)
end
local head = live_head(6)
if not holds then
    -- Not held by this field; if the lock expired, the head may take it now.
    if head and redis.call('exists', KEYS[1]) == 0 then
        redis.call(ARGV[4], KEYS[4] .. ':' .. head, ARGV[1])
    end
    return nil
end
local left = 0
if ARGV[2] ~= '0' then
    left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
end
if left > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    if KEYS[7] then
        delay_extend(7, KEYS[1], ARGV[3], ARGV[7])
    end
    replay_write(KEYS[5], 0, ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
if KEYS[7] then
    redis.call('del', KEYS[7])
end
if ARGV[8] == '1' then
    replay_write(KEYS[5], 1, ARGV[5])
end
local woken = 0
if head then
    woken = redis.call(ARGV[4], KEYS[4] .. ':' .. head, ARGV[1])
end
return 1 + woken
