-- Acquire a reentrant lock, or count one more hold for its owner.
-- Needs: common/counter, common/claim, common/lease, common/delay
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the hand-off claim relock_claim:{<name>}: "<priority>:<holder field>" of the waiter
--          that the lock's next free moment is promised to
-- KEYS[3]  (a fenced lock only) the fencing token counter redisson_lock_token:{<name>}: a new
--          owner's hold increments it; the reply then carries the token
-- ARGV[1]  lease in milliseconds: a new lock expires after it; a re-entry extends the TTL to
--          it when shorter and never shortens it (another hold of the owner may need more)
-- ARGV[2]  holder field <client-uuid>:<owner>
-- ARGV[3]  claim priority: when above 0 and the lock is busy, claim its next hand-off for this
--          field unless a waiter with a priority as high has (waiters pass the number of races
--          they lost, so the one that lost most goes next); 0: do not claim
-- ARGV[4]  the claim window in ms: how long a claim made here outlives the lease it waits on,
--          and the most a claim on a free lock may have left (a release cuts the claim to the
--          window itself, but an expiry, a DEL, an eviction or another library's unlock does not:
--          a claimant that died would otherwise hold a free lock back for a whole lease)
-- ARGV[5]  (a lock with a lock-delay only) the delay in ms, above 0; KEYS[3] is then the shadow
--          lease relock_lease:{<name>} (lua/common/delay.lua), not a token counter: a free lock
--          whose shadow lives is delayed, and a hold taken or re-entered sets the shadow to
--          outlive the lock by the delay; "" for none when ARGV[6] follows
-- ARGV[6]  (optional) "refuse": the owner's re-entry is refused (Redisson's non-reentrant lock):
--          a holder field that holds the lock already gets the error NON_REENTRANT_REACQUIRE,
--          and nothing is written; else it re-enters
--
-- Reply:   nil when the hold was taken (new hold or re-entry), or, with KEYS[3], {token}: the
--          counter after its increment for a new owner, as it stands for a re-entry (the
--          owner's token, since nobody else took the lock meanwhile); else how long to wait at most
--          before trying again, in ms: the lock's remaining TTL (PTTL: -1 if it has none), or,
--          when the lock is free but claimed by another waiter, the claim's; or, with ARGV[5],
--          {ms, 'delayed'} when the lock is free but in its lock-delay: ms is what is left of it.
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type (the token counter: or a
--          string that is not a whole number), raised before anything is written;
--          NON_REENTRANT_REACQUIRE (returned, Redisson's text) for a refused re-entry.
--
-- Same data and replies as Redisson's RLock acquire, so both exclude each other (Redisson's
-- re-entry sets the TTL outright, which can cut short a longer hold of the same owner).
-- The claim's format and rules are lua/common/claim.lua's, the lease's lua/common/lease.lua's.

-- Every key that a command below could fail on is read first, so a bad one fails the script
-- before it writes (Redis keeps a script's writes made before an error).
local delay = ARGV[5] ~= '' and ARGV[5] or nil
local token = not delay and KEYS[3] and counter_read(3)
if delay then
    delay_check(3)
end
if on_key(1, 'hlen') == 0 then
    local left = delay and delay_left(3) or 0
    if left > 0 then
        return {left, 'delayed'}
    end
    local wait = claim_pass(2, ARGV[2], ARGV[4])
    if wait then
        return wait
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if delay then
        delay_extend(3, KEYS[1], ARGV[2], delay)
    elseif KEYS[3] then
        return {redis.call('incr', KEYS[3])}
    end
    return nil
end
local holds = redis.call('hget', KEYS[1], ARGV[2])
if holds then
    if ARGV[6] == 'refuse' then
        return redis.error_reply('NON_REENTRANT_REACQUIRE')
    end
    hold_count_check(1, holds)
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    lease_raise(KEYS[1], ARGV[1])
    if delay then
        delay_extend(3, KEYS[1], ARGV[2], delay)
    elseif KEYS[3] then
        return {token or redis.call('incr', KEYS[3])}
    end
    return nil
end
local ttl = redis.call('pttl', KEYS[1])
local priority = tonumber(ARGV[3])
if priority > 0 then
    claim_take(2, priority, ARGV[2], ttl, ARGV[4])
end
return ttl
