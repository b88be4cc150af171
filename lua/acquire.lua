-- Acquire a reentrant lock, or count one more hold for its owner.
--
-- KEYS[1]  the lock hash <name>
-- ARGV[1]  lease in milliseconds (PEXPIRE of the hash)
-- ARGV[2]  holder field <client-uuid>:<owner>
--
-- Reply:   nil when the hold was taken (new hold or re-entry),
--          else the lock's remaining TTL in ms (PTTL: -1 if it has none).
-- Errors:  WRONGTYPE when <name> exists but is not a hash.
--
-- Same data and replies as Redisson's RLock acquire, so both exclude each other.
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
