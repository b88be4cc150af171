-- A fenced GET, after lua/fence/check.lua's check: a read that records its token, so that no older
-- holder can write after it (the read half of a fenced read-modify-write).
-- Needs: fence/string, fence/check
--
-- KEYS[1]  the data key
--          (then the fence key; ARGV holds only the token, which lua/fence/check.lua takes off)
--
-- Reply:   the value, or nil when there is none.
-- Errors:  those of lua/fence/check.lua; WRONGTYPE when the data key is not a string.
return redis.call('get', KEYS[1])
