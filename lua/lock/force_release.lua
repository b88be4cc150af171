-- Delete a lock whoever holds it, and wake a waiter.
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the wake-up channel redisson_lock__channel:{<name>}
-- KEYS[3]  the hand-off claim relock_claim:{<name>}
-- ARGV[1]  the message to publish ("0")
-- ARGV[2]  the publish command: PUBLISH (or SPUBLISH); empty: publish nothing (a spin lock)
-- ARGV[3]  the claim window in ms: a claim lives at most this much longer
--
-- Reply:   1 when a lock was deleted, 0 when there was none.
-- Errors:  WRONGTYPE when <name> holds another type: a user's string is never deleted.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
redis.call('del', KEYS[1])
if redis.call('pttl', KEYS[3]) > tonumber(ARGV[3]) then
    redis.call('pexpire', KEYS[3], ARGV[3])
end
if ARGV[2] ~= '' then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return 1
