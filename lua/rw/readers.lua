-- The read-write lock's readers, as every script that touches them sees them. Prepended to each
-- script in lua/rw/ and to lua/abandon.lua (the catalogue, src/scripts/catalogue.rs, joins
-- them), so the rules for readers are written once.
--
-- Redisson's layout: the hash <name> has `mode` ("read" or "write"), one field per reader
-- (<client-uuid>:<owner> -> hold count) and the writer's field (<client-uuid>:<owner>:write ->
-- hold count). Each read hold n of a reader also has a STRING
-- {<name>}:<field>:rwlock_timeout:<n> (or <name>:<field>:rwlock_timeout:<n> when the name has a
-- `{tag}`) that expires with that hold's lease: it is how one reader's lease stays its own.
--
-- A reader *lives* while one of its timeout keys does. A reader field whose keys are all gone
-- (its holder stopped renewing) holds nothing: relock's scripts drop it when they meet it, and
-- never count it toward the lock's TTL.

-- The prefix of reader `field`'s timeout keys on lock `name` (Redisson's suffixName).
local function rw_timeouts(name, field)
    if string.find(name, '{', 1, true) then
        return name .. ':' .. field .. ':rwlock_timeout'
    end
    return '{' .. name .. '}:' .. field .. ':rwlock_timeout'
end

-- Whether `field` is a writer's field.
local function rw_is_writer(field)
    return string.sub(field, -6) == ':write'
end

-- Whether reader `field` holds lock `name`: it has a count and one of its timeout keys lives.
local function rw_alive(name, field)
    local count = tonumber(redis.call('hget', name, field))
    if not count then
        return false
    end
    local prefix = rw_timeouts(name, field)
    for n = count, 1, -1 do
        if redis.call('exists', prefix .. ':' .. n) == 1 then
            return true
        end
    end
    return false
end

-- Deletes reader `field` of lock `name` and its timeout keys.
local function rw_drop(name, field)
    local count = tonumber(redis.call('hget', name, field)) or 0
    local prefix = rw_timeouts(name, field)
    for n = 1, count do
        redis.call('del', prefix .. ':' .. n)
    end
    redis.call('hdel', name, field)
end

-- The longest remaining lease among the readers' holds of lock `name` in ms, -2 when none lives.
local function rw_readers_ttl(name)
    local longest = -2
    local all = redis.call('hgetall', name)
    for i = 1, #all, 2 do
        local count = tonumber(all[i + 1])
        if count and not rw_is_writer(all[i]) then
            local prefix = rw_timeouts(name, all[i])
            for n = count, 1, -1 do
                longest = math.max(longest, redis.call('pttl', prefix .. ':' .. n))
            end
        end
    end
    return longest
end

-- Deletes every reader's timeout keys of lock `name`, then the lock itself.
local function rw_delete(name)
    local all = redis.call('hgetall', name)
    for i = 1, #all, 2 do
        if tonumber(all[i + 1]) and not rw_is_writer(all[i]) then
            rw_drop(name, all[i])
        end
    end
    redis.call('del', name)
end

