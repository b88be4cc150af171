-- Counts a count-down latch down by one (Redisson's countDown), with a replay key so that a
-- retry after a lost reply counts once.
-- Needs: common/counter, common/replay
--
-- KEYS[1]  the count <name>
-- KEYS[2]  the channel redisson_countdownlatch__channel__{<name>}
-- KEYS[3]  the replay key relock_request:{<name>}:<client-id>:<n>
-- ARGV[1]  the publish command: PUBLISH or SPUBLISH
-- ARGV[2]  how long the replay key lives, in ms
-- ARGV[3]  1 when this request may have reached the server before (a retry): the replay key is
--          read first; 0 on its first send
--
-- At 0 the count is deleted and "0" published (every waiter wakes), as Redisson does; a latch
-- that has no count is open already and is left as it is.
-- Reply:   the count after it (0 when open).
-- Errors:  WRONGTYPE ... [key 1] when <name> is not a count; nothing is written then.
local replayed, reply = replay_read(3, ARGV[3])
if replayed then
    return reply
end
local count = counter_read(1)
local left = 0
if count then
    left = redis.call('decr', KEYS[1])
    if left <= 0 then
        redis.call('del', KEYS[1])
        if left == 0 then
            redis.call(ARGV[1], KEYS[2], '0')
        end
        left = 0
    end
end
replay_write(KEYS[3], left, ARGV[2])
return left
