-- Withdraw a hand-off claim: a waiter that claimed the lock's next free moment gave up.
-- Needs: common/counter, common/claim
-- Flags: allow-oom
--
-- KEYS[1]  the hand-off claim relock_claim:{<name>} ("<priority>:<holder field>")
-- KEYS[2]  optional: a channel to wake when the claim goes (a read-write lock's, whose readers
--          a writer's claim keeps out even while the lock is read-locked)
-- ARGV[1]  holder field <client-uuid>:<owner> of the waiter that gives up
-- ARGV[2]  with KEYS[2]: the publish command, PUBLISH or SPUBLISH
-- ARGV[3]  with KEYS[2]: the message
--
-- Reply:   1 when this field's claim was deleted, 0 when the claim was not its own (or none).
-- Errors:  WRONGTYPE ... [key 1] when the claim key holds another type; nothing is written then.
--
-- The claim's format is lua/common/claim.lua's. A claim without an expiry is withdrawn too.
local value = on_key(1, 'get')
local _, claimant = claim_parse(value or '')
if value and claimant == ARGV[1] then
    redis.call('del', KEYS[1])
    if KEYS[2] then
        redis.call(ARGV[2], KEYS[2], ARGV[3])
    end
    return 1
end
return 0
