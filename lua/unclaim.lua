-- Withdraw a hand-off claim: a waiter that claimed the lock's next free moment gave up.
--
-- KEYS[1]  the hand-off claim relock_claim:{<name>} ("<priority>:<holder field>")
-- ARGV[1]  holder field <client-uuid>:<owner> of the waiter that gives up
--
-- Reply:   1 when this field's claim was deleted, 0 when the claim was not its own (or none).
local value = redis.call('get', KEYS[1])
if value and string.match(value, '^%d+:(.+)$') == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
