-- The keys of every script (a semaphore's and a latch's, a lock's and its auxiliary keys), checked
-- before a script writes anything, so that a key of another type fails the script with nothing
-- changed (Redis keeps the writes a script made before an error). The error names the key by its place in
-- KEYS (`... [key <i>]`), so the client can say which key it was. The checks cost no command of
-- their own: the script's first command on each key is run through `on_key`, which turns that
-- command's failure into the error.

-- Fails the script with a WRONGTYPE naming KEYS[i].
local function wrong_type(i, found)
    error({err = 'WRONGTYPE the key holds ' .. found .. ' [key ' .. i .. ']'})
end

-- Runs `command` on KEYS[i] with the arguments that follow and returns its reply. When the key
-- holds another type (or, for a counter's command, a string that is not a whole number), the
-- command fails without writing and the script fails with a WRONGTYPE naming KEYS[i].
local function on_key(i, command, ...)
    local reply = redis.pcall(command, KEYS[i], ...)
    if type(reply) == 'table' and reply.err then
        if string.find(reply.err, 'WRONGTYPE', 1, true) then
            wrong_type(i, 'a value of another type')
        end
        if string.find(reply.err, 'not an integer', 1, true) then
            wrong_type(i, 'a string that is not a count')
        end
        error(reply)
    end
    return reply
end

-- Fails the script unless KEYS[i] holds a sorted set or nothing.
local function zset_check(i)
    on_key(i, 'zcard')
end

-- The counter in KEYS[i] as a number (permits, or a latch's count), or nil when there is none.
-- Fails the script when the key holds another type, or a string that is not a whole number.
local function counter_read(i)
    local value = on_key(i, 'get')
    if not value then
        return nil
    end
    local count = tonumber(value)
    if not count or not string.match(value, '^%-?[0-9]+$') then
        wrong_type(i, 'a string that is not a count')
    end
    return count
end

-- Fails the script with a WRONGTYPE naming KEYS[i] unless `value`, a hold count read from the
-- hash KEYS[i], is a whole number (HINCRBY would fail on it).
local function hold_count_check(i, value)
    if not string.match(value, '^%-?[0-9]+$') then
        wrong_type(i, 'a hold count that is not a number')
    end
end
