-- Gives permits back to a semaphore and wakes its waiters (Redisson's RSemaphore release, with a
-- replay key so that a retry after a lost reply counts once).
-- Needs: common/counter, common/replay
-- Flags: allow-oom
--
-- KEYS[1]  the counter <name> (created when missing, as Redisson does)
-- KEYS[2]  the wake-up channel redisson_sc:{<name>}
-- KEYS[3]  the replay key relock_request:{<name>}:<client-id>:<n>
-- ARGV[1]  permits to give back, at least 1
-- ARGV[2]  the publish command: PUBLISH or SPUBLISH
-- ARGV[3]  how long the replay key lives, in ms
-- ARGV[4]  1 when this request may have reached the server before (a retry): the replay key is
--          read first; 0 on its first send
--
-- Publishes the count after the release, as Redisson does, when it is above 0 (a Redisson
-- process wakes that many of its waiters; a count of 0 or less lets none in).
-- Reply:   the count after the release (replayed by a retry).
-- Errors:  WRONGTYPE ... [key 1] when <name> is not a counter; nothing is written then.
local replayed, reply = replay_read(3, ARGV[4])
if replayed then
    return reply
end
local count = on_key(1, 'incrby', ARGV[1])
if count > 0 then
    redis.call(ARGV[2], KEYS[2], count)
end
replay_write(KEYS[3], count, ARGV[3])
return count
