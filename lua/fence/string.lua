-- The data key of a fenced string operation (get.lua), checked before lua/fence/check.lua records
-- the token: a data key of another type fails the script with the fence unchanged (Redis keeps a
-- script's writes made before an error).
--
-- KEYS[1]  the data key
--
-- Errors:  WRONGTYPE when the data key holds another type than a string.
redis.call('strlen', KEYS[1])

