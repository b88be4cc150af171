-- Acquire several reentrant locks of one owner at once, all or none: the fast path of a
-- multi-lock whose plain locks share a client and a cluster slot.
-- Needs: common/counter, common/claim, common/lease
--
-- Each part is taken exactly as lua/lock/acquire.lua takes a lock with claim priority 0 (it
-- claims nothing), and only if every part can be taken now: free and not claimed by another
-- field, or already held by this field (a re-entry). The parts are checked first, in order, and
-- nothing is written until all have passed, so a busy part leaves the others as they were.
--
-- KEYS     for each part i = 1..k, two keys:
-- KEYS[2i-1]  the lock hash <name>
-- KEYS[2i]    its hand-off claim relock_claim:{<name>} (see acquire.lua)
-- ARGV[1]  lease in milliseconds: a new lock expires after it; a re-entry extends the TTL to
--          it when shorter and never shortens it
-- ARGV[2]  holder field <client-uuid>:<owner>
-- ARGV[3]  the claim window in ms: the most a claim on a free lock may have left (as in
--          acquire.lua's ARGV[4])
--
-- Reply:   nil when every part was taken (new holds or re-entries); else {i, ttl} for the first
--          part i (1-based) that is busy, with how long to wait at most before trying again, in
--          ms, as acquire.lua answers: the lock's remaining TTL (PTTL: -1 if it has none), or,
--          when the lock is free but claimed by another waiter, the claim's (cut to the window
--          first, as acquire.lua cuts it). Nothing else is changed.
-- Errors:  WRONGTYPE ... [part i] when part i's <name> exists but is not a hash (the first
--          such part), WRONGTYPE ... [key 2i] when its claim holds another type; raised while
--          checking, so nothing was taken.

local field, window = ARGV[2], tonumber(ARGV[3])

-- Check every part: 1 = free, 2 = free and claimed by this field, 3 = a re-entry.
-- Most acquires find every part free and unclaimed: two EXISTS say so for all of them (unpack
-- is kept to a few thousand keys, within Lua's stack).
local parts = #KEYS / 2
if parts <= 4000 then
    local names, claims = {}, {}
    for i = 1, parts do
        names[i], claims[i] = KEYS[2 * i - 1], KEYS[2 * i]
    end
    if redis.call('exists', unpack(names)) == 0 and redis.call('exists', unpack(claims)) == 0 then
        for i = 1, parts do
            redis.call('hincrby', names[i], field, 1)
            redis.call('pexpire', names[i], ARGV[1])
        end
        return nil
    end
end

local how = {}
for i = 1, parts do
    local name, claim = KEYS[2 * i - 1], KEYS[2 * i]
    if redis.call('exists', name) == 0 then
        local _, who = claim_read(2 * i)
        if who and who ~= field then
            return {i, claim_wait(claim, window)}
        end
        how[i] = who and 2 or 1
    else
        local held = redis.pcall('hexists', name, field)
        if type(held) == 'table' then
            return redis.error_reply(held.err .. ' [part ' .. i .. ']')
        end
        if held == 0 then
            return {i, redis.call('pttl', name)}
        end
        how[i] = 3
    end
end

for i = 1, #how do
    local name = KEYS[2 * i - 1]
    redis.call('hincrby', name, field, 1)
    if how[i] == 3 then
        lease_raise(name, ARGV[1])
    else
        if how[i] == 2 then
            redis.call('del', KEYS[2 * i])
        end
        redis.call('pexpire', name, ARGV[1])
    end
end
return nil
