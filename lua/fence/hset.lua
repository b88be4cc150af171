-- A fenced HSET of one field, after lua/fence/check.lua's check.
--
-- KEYS[1]  the data hash
-- ARGV[1]  the field
-- ARGV[2]  its new value
--          (then the fence key and the token, which lua/fence/check.lua takes off)
--
-- Reply:   1 when the field is new, 0 when it was replaced.
-- Errors:  those of lua/fence/check.lua; WRONGTYPE when the data key is not a hash.
return redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
