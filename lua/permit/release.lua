-- Gives back one permit of a permit semaphore by its id (Redisson's tryRelease).
-- Needs: common/counter, permit/leases
-- Flags: allow-oom
--
-- KEYS[1]  the counter <name>
-- KEYS[2]  the wake-up channel redisson_sc:{<name>}
-- KEYS[3]  the leases {<name>}:timeout
-- ARGV[1]  the permit's id: 16 raw bytes
-- ARGV[2]  the publish command: PUBLISH or SPUBLISH
--
-- A permit still in the leases goes back to the counter, whose count is then published when
-- above 0 (Redisson publishes it whatever its sign). Running it twice gives the permit back once.
-- Reply:   1 when given back within its lease; 2 when given back but its lease had ended (nobody
--          had reclaimed it yet); 0 when the id is not in the leases (given back already,
--          reclaimed after its lease ended, or never taken).
-- Errors:  WRONGTYPE ... [key <i>] when a key holds another type; nothing is written then.
local score = on_key(3, 'zscore', ARGV[1])
-- The counter's type is checked whether or not the id is out: a name whose key holds another
-- type fails this call as it fails every other.
counter_read(1)
if not score then
    return 0
end
local count = on_key(1, 'incrby', 1)
redis.call('zrem', KEYS[3], ARGV[1])
if count > 0 then
    redis.call(ARGV[2], KEYS[2], count)
end
if tonumber(score) <= now_ms() then
    return 2
end
return 1
