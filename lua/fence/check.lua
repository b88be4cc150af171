-- The fence's check, which every fenced script runs first; the operation's own part follows it
-- (get.lua, set.lua or hset.lua beside it, or a user's script).
--
-- KEYS[#KEYS]  the fence key relock_fence:{<resource>}: the highest token seen, in decimal
-- ARGV[#ARGV]  the token this operation presents, in decimal, at least 1
--
-- Both are taken off the end of KEYS and ARGV, so the part that follows sees only its own keys
-- and arguments. A token passes when it is at least the highest seen (an equal one passes: one
-- holder writes many times); it is recorded as seen, and the part that follows runs. Tokens
-- compare exactly over the whole u64 range, beyond the 2^53 of Lua's numbers.
--
-- Errors:  RELOCK_STALE <seen> when the token is older than <seen>: nothing was applied.
--          WRONGTYPE relock fence ... when the fence key is not a string.
--          ERR relock fence ... when it holds something other than a token.
do
    -- Whether token a is older than token b: a shorter one is, and two of one length compare
    -- as two halves of at most ten digits each (a u64 has at most twenty).
    local function older(a, b)
        if #a ~= #b then
            return #a < #b
        end
        local high_a = tonumber(string.sub(a, 1, -11)) or 0
        local high_b = tonumber(string.sub(b, 1, -11)) or 0
        if high_a ~= high_b then
            return high_a < high_b
        end
        return tonumber(string.sub(a, -10)) < tonumber(string.sub(b, -10))
    end

    local fence = table.remove(KEYS)
    local token = table.remove(ARGV)
    local seen = redis.pcall('get', fence)
    if type(seen) == 'table' then
        return redis.error_reply('WRONGTYPE relock fence key holds a value of another type')
    end
    if seen then
        if #seen > 20 or not string.match(seen, '^[1-9]%d*$') then
            return redis.error_reply('ERR relock fence key holds a value that is not a token')
        end
        if older(token, seen) then
            return redis.error_reply('RELOCK_STALE ' .. seen)
        end
    end
    if seen ~= token then
        redis.call('set', fence, token)
    end
end

