-- Release one hold of each of several reentrant locks of one owner at once: the fast path of a
-- multi-lock whose plain locks share a client and a cluster slot. Each part is released exactly
-- as lua/lock/release.lua releases one lock; the parts are independent (one may be held no more
-- while the others are released).
-- Needs: common/counter, common/claim, common/replay
-- Flags: allow-oom
--
-- KEYS     for each part i = 1..k, four keys:
-- KEYS[4i-3]  the lock hash <name>
-- KEYS[4i-2]  the wake-up channel redisson_lock__channel:{<name>}
-- KEYS[4i-1]  the part's replay key redisson_unlock_latch:{<name>}:<request-id>
-- KEYS[4i]    the hand-off claim relock_claim:{<name>}
-- ARGV[1]  the message to publish on a part's last release ("0")
-- ARGV[2]  holder field <client-uuid>:<owner>
-- ARGV[3]  the publish command: PUBLISH or SPUBLISH; empty: publish nothing
-- ARGV[4]  how long a replay key lives, in ms
-- ARGV[5]  the claim window in ms: on a part's last release its claim lives at most this long
-- ARGV[6]  1 when this request may have reached the server before: each part's replay key is
--          read first; 0 on the first send
-- ARGV[7]  1 when a part's last release writes its replay key too (relock always asks for it
--          here); 0: only a release that leaves holds behind writes one
-- ARGV[7+i]  part i's TTL in ms to set while its holds remain: what the owner's remaining holds
--          of that lock need (release.lua's ARGV[2]); 0: no hold of the owner's may remain,
--          so the part is freed whatever the field's count
--
-- Reply:   an array of k results, part i's at i, each as release.lua answers for one lock: nil
--          (Lua false) when the field holds nothing, 0 when holds remain, 1 + n when the lock was
--          freed and its wake-up reached n subscribed connections; a part whose replay key was
--          found replays 0 or 1.
-- Errors:  WRONGTYPE ... [part i] when part i's <name> exists but is not a hash, or holds this
--          field with a count that is not a number (the first such part); raised while
--          checking, so no part was released.

local field = ARGV[2]
-- Check every part first (a replayed result, or whether the field holds it), so that a part
-- that is not a hash fails the script before anything was written.
local parts = #KEYS / 4
local results, held = {}, {}
for i = 1, parts do
    local replayed, reply = replay_read(4 * i - 1, ARGV[6])
    if replayed then
        results[i] = reply
    end
    local holds = redis.pcall('hget', KEYS[4 * i - 3], field)
    if type(holds) == 'table' then
        return redis.error_reply(holds.err .. ' [part ' .. i .. ']')
    end
    if holds and not string.match(holds, '^%-?[0-9]+$') then
        return redis.error_reply('WRONGTYPE a hold count that is not a number [part ' .. i .. ']')
    end
    held[i] = tonumber(holds)
end
-- Most releases meet no claim at all: one EXISTS over every part's claim key spares a PTTL each.
local claims = {}
for i = 1, parts do
    claims[i] = KEYS[4 * i]
end
local claimed = #claims > 4000 or redis.call('exists', unpack(claims)) > 0
for i = 1, parts do
    local name, channel, latch, claim = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
    if results[i] ~= nil then
        -- replayed
    elseif not held[i] then
        results[i] = false
    elseif held[i] > 1 and ARGV[7 + i] ~= '0' then
        redis.call('hincrby', name, field, -1)
        redis.call('pexpire', name, ARGV[7 + i])
        replay_write(latch, 0, ARGV[4])
        results[i] = 0
    else
        redis.call('del', name)
        if claimed then
            claim_cut(claim, ARGV[5])
        end
        local woken = 0
        if ARGV[3] ~= '' then
            woken = redis.call(ARGV[3], channel, ARGV[1])
        end
        if ARGV[7] == '1' then
            replay_write(latch, 1, ARGV[4])
        end
        results[i] = 1 + woken
    end
end
return results
