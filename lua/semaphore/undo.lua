-- Gives back the permits of an acquire that was cancelled after it was sent, if it took any.
-- Needs: common/counter
-- Flags: allow-oom
--
-- KEYS[1]  the counter <name>
-- KEYS[2]  the wake-up channel redisson_sc:{<name>}
-- KEYS[3]  the acquire's request key (see semaphore/acquire.lua)
-- ARGV[1]  the publish command: PUBLISH or SPUBLISH
--
-- Reply:   the permits given back: 0 when the acquire took none (or they were given back
--          already: the request key goes with them, so a second run gives nothing).
-- Errors:  WRONGTYPE ... [key <i>] when <name> is not a counter, or the request key not a count;
--          nothing is written then.
counter_read(1)
local taken = on_key(3, 'get')
if not taken then
    return 0
end
-- Read before the DEL below: a count INCRBY could not add fails the script with nothing written.
if not string.match(taken, '^[0-9]+$') then
    wrong_type(3, 'a string that is not a count')
end
redis.call('del', KEYS[3])
local count = redis.call('incrby', KEYS[1], taken)
if count > 0 then
    redis.call(ARGV[1], KEYS[2], count)
end
return tonumber(taken)
