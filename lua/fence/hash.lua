-- The data key of a fenced hash operation (hset.lua), checked before lua/fence/check.lua records
-- the token: a data key of another type fails the script with the fence unchanged (Redis keeps a
-- script's writes made before an error).
--
-- KEYS[1]  the data hash
--
-- Errors:  WRONGTYPE when the data key holds another type than a hash.
redis.call('hlen', KEYS[1])

