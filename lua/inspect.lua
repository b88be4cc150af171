-- Read a lock's state in one consistent step.
--
-- KEYS[1]  the lock hash <name>
-- ARGV[1]  holder field <client-uuid>:<owner>
--
-- Reply:   {locked, pttl, holds}: locked is 1 when the hash exists, else 0; pttl is the
--          remaining lease in ms (-2 when unlocked, -1 without expiry); holds is this
--          owner's hold count (0 when it holds nothing).
-- Errors:  WRONGTYPE when <name> exists but is not a hash.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return {0, -2, 0}
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
return {1, redis.call('pttl', KEYS[1]), holds}
