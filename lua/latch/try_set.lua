-- Sets a count-down latch's count unless it is set already (Redisson's trySetCount).
-- Needs: common/counter
--
-- KEYS[1]  the count <name>
-- KEYS[2]  the channel redisson_countdownlatch__channel__{<name>}
-- ARGV[1]  the count, at least 1
-- ARGV[2]  the publish command: PUBLISH or SPUBLISH
--
-- Publishes "1" (a new count: Redisson closes its local latches) when it sets the count.
-- Reply:   1 when set; 0 when the latch has a count already.
-- Errors:  WRONGTYPE ... [key 1] when <name> is not a count; nothing is written then.
if counter_read(1) then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], '1')
return 1
