-- The fair lock's queue, as every fair script sees it. Prepended to each script in lua/fair/
-- (the catalogue, src/scripts/catalogue.rs, joins them), so the rule for dead waiters is written
-- once.
--
-- KEYS[2]  the queue redisson_lock_queue:{<name>}: LIST of waiting holder fields, in FIFO order
-- KEYS[3]  the deadlines redisson_lock_timeout:{<name>}: ZSET waiting field -> epoch ms after
--          which it counts as dead
--
-- `now` is the server's clock in ms (`TIME`): every deadline relock writes is on it.
-- `live_head()` drops dead heads, as many as there are in a row, and returns the live head, or
-- nil. A head is dead when its deadline has passed or when it has none at all (debris: a list
-- entry without a deadline could otherwise hold the queue forever). Only the head is ever dropped.
-- Its reads go through `on_key` (lua/common/counter.lua, which each fair script needs before
-- this file): a queue or deadlines key of another type fails the script, named, and before
-- `live_head()` writes; a script that writes before calling it checks those keys first.

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function live_head()
    while true do
        local head = on_key(2, 'lindex', 0)
        if not head then
            return nil
        end
        local deadline = on_key(3, 'zscore', head)
        if deadline and tonumber(deadline) > now then
            return head
        end
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], head)
    end
end

