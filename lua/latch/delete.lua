-- Deletes a count-down latch (Redisson's delete): it is open from then on.
-- Needs: common/counter
-- Flags: allow-oom
--
-- KEYS[1]  the count <name>
-- KEYS[2]  the channel redisson_countdownlatch__channel__{<name>}
-- ARGV[1]  the publish command: PUBLISH or SPUBLISH
--
-- Publishes "0" when it deleted a count: the latch is open, so every waiter goes, Redisson's
-- too. (Redisson's own delete publishes "1", which closes its waiters' local latch: they wait on
-- for a latch that is open, until their timeout or for good.)
-- Reply:   1 when there was a count, else 0.
-- Errors:  WRONGTYPE ... [key 1] when <name> is not a count; nothing is deleted then.
if not counter_read(1) then
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[1], KEYS[2], '0')
return 1
