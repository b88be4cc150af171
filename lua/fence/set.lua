-- A fenced SET, after lua/fence/check.lua's check: like SET, it replaces the value and any TTL.
-- Needs: fence/check
--
-- KEYS[1]  the data key
-- ARGV[1]  its new value
--          (then the fence key and the token, which lua/fence/check.lua takes off)
--
-- Reply:   OK.
-- Errors:  those of lua/fence/check.lua.
return redis.call('set', KEYS[1], ARGV[1])
