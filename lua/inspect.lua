-- Read a lock's state in one consistent step.
-- Needs: common/hash, rw/readers
--
-- KEYS[1]  the lock hash <name>
-- ARGV[1]  holder field <client-uuid>:<owner> (a read-write lock's writer: ...:<owner>:write)
-- ARGV[2]  what counts as locked: "" (or absent) the lock exists; "read" a read-write lock's read lock is
--          taken (read-locked, or write-locked by a writer that also reads, as Redisson says);
--          "write" its write lock is taken
--
-- Reply:   {locked, pttl, holds}: locked is 1 when locked as ARGV[2] says, else 0; pttl is the
--          remaining lease in ms of the lock hash (-2 when there is none, -1 without expiry);
--          holds is this holder's hold count (0 when it holds nothing).
--
-- A read-write lock's reader whose timeout keys are all gone (its lease ran out) holds nothing
-- (rw/readers.lua): asked with "read", this counts only live readers, and drops the lapsed ones
-- it meets, the lock itself when no reader is left, so the queries agree with the guards.
-- Errors:  WRONGTYPE when <name> exists but is not a hash.
local kind, wrong = hash_type(KEYS[1])
if wrong then
    return wrong
end
if kind == 'none' then
    return {0, -2, 0}
end
local view = ARGV[2] or ''
if view == 'read' and redis.call('hget', KEYS[1], 'mode') == 'read' then
    local live = false
    local all = redis.call('hgetall', KEYS[1])
    for i = 1, #all, 2 do
        local field = all[i]
        if field ~= 'mode' and not rw_is_writer(field) then
            if rw_alive(KEYS[1], field) then
                live = true
            else
                rw_drop(KEYS[1], field)
            end
        end
    end
    if not live then
        redis.call('del', KEYS[1])
        return {0, -2, 0}
    end
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0') or 0
local locked = 1
if view ~= '' then
    local mode = redis.call('hget', KEYS[1], 'mode')
    if view == 'write' then
        locked = mode == 'write' and 1 or 0
    else
        locked = (mode == 'read' or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2)) and 1 or 0
    end
end
return {locked, redis.call('pttl', KEYS[1]), holds}
