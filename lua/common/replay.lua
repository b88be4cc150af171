-- A release's replay key redisson_unlock_latch:{<name>}:<request-id>: what the release answered
-- (0: holds remained, 1: the lock was freed), so that its retry after a lost reply replays the
-- answer instead of counting twice. Written and read only here.

-- Whether the release with replay key KEYS[i] answered before, and what: true and the answer
-- when `sent_before` is '1' (the request may have reached the server before) and the key is
-- there; false otherwise (on a first send the key cannot exist yet, so it is not read). A replay
-- key of another type fails the script, named (`on_key`, lua/common/counter.lua, which a script
-- needs before this file), before it writes.
local function replay_read(i, sent_before)
    if sent_before == '1' then
        local replay = on_key(i, 'get')
        if replay then
            return true, tonumber(replay)
        end
    end
    return false
end

-- Records the release's answer `reply` (0 or 1) under its replay key `latch` for `ttl` ms.
local function replay_write(latch, reply, ttl)
    redis.call('set', latch, reply, 'px', ttl)
end

