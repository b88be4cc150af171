-- The keys of a semaphore and a latch, checked before a script writes anything, so that a key of
-- another type fails the script with nothing changed. The error names the key by its place in
-- KEYS (`... [key <i>]` at its end), so the client can say which key it was.

-- Fails the script with a WRONGTYPE naming KEYS[i].
local function wrong_type(i, found)
    error({err = 'WRONGTYPE the key holds a ' .. found .. ' [key ' .. i .. ']'})
end

-- Fails the script unless KEYS[i] holds a sorted set or nothing.
local function zset_check(i)
    local found = redis.call('type', KEYS[i]).ok
    if found ~= 'none' and found ~= 'zset' then
        wrong_type(i, found)
    end
end

-- The counter in KEYS[i] as a number (permits, or a latch's count), or nil when there is none.
-- Fails the script when the key holds another type, or a string that is not a whole number.
local function counter_read(i)
    local found = redis.call('type', KEYS[i]).ok
    if found == 'none' then
        return nil
    end
    if found ~= 'string' then
        wrong_type(i, found)
    end
    local value = redis.call('get', KEYS[i])
    local count = tonumber(value)
    if not count or not string.match(value, '^%-?[0-9]+$') then
        wrong_type(i, 'string that is not a count')
    end
    return count
end
