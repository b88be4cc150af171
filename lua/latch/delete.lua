-- Deletes a count-down latch (Redisson's delete): it is open from then on.
-- Needs: common/counter
--
-- KEYS[1]  the count <name>
-- KEYS[2]  the channel redisson_countdownlatch__channel__{<name>}
-- ARGV[1]  the publish command: PUBLISH or SPUBLISH
--
-- Publishes "1" when it deleted a count, as Redisson does; relock's waiters read the count again
-- on it and find the latch open.
-- Reply:   1 when there was a count, else 0.
-- Errors:  WRONGTYPE ... [key 1] when <name> is not a count; nothing is deleted then.
if not counter_read(1) then
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[1], KEYS[2], '1')
return 1
