-- Take an election's term for a candidate when nobody leads: a new epoch, written to history
-- (after the vacancy of a term that ended without a resign, if nobody wrote it yet).
-- Needs: common/counter, common/claim, common/delay, election/history
--
-- KEYS[1]  the election's lock hash relock_election:<name> (the leader's holder field → 1)
-- KEYS[2]  the hand-off claim relock_claim:{<lock>} (lua/common/claim.lua)
-- KEYS[3]  the epoch counter redisson_lock_token:{<lock>} (a fenced lock's token counter)
-- KEYS[4]  the history relock_election_log:{<lock>} (lua/election/history.lua)
-- KEYS[5]  the change channel relock_election_changes:{<lock>}
-- KEYS[6]  (with a lock-delay only) the shadow lease relock_lease:{<lock>} (lua/common/delay.lua)
-- ARGV[1]  lease in ms
-- ARGV[2]  the candidate's holder field <client-uuid>:<owner>
-- ARGV[3]  claim priority, as lua/lock/acquire.lua's (0: do not claim)
-- ARGV[4]  the claim window in ms, as lua/lock/acquire.lua's
-- ARGV[5]  the publish command for the change channel (PUBLISH or SPUBLISH)
-- ARGV[6]  the candidate's pid
-- ARGV[7]  the candidate's host
-- ARGV[8]  the candidate's program
-- ARGV[9]  (with KEYS[6]) the lock-delay in ms; else ignored (relock sends 0)
-- ARGV[10] (optional) the candidate's metadata, written with its election ('' or absent: none)
--
-- Reply:   {epoch, vacant_ms} when the term was taken: vacant_ms is how long history says the
--          election was vacant before (-1 when history has no vacancy before it); {epoch, -1}
--          when this candidate leads already (a retry of an acquire whose reply was lost). Else
--          how long to wait at most before trying again, in ms (the leader's PTTL, or a claim's
--          on a vacant election), or {ms, 'delayed'} while a lock-delay lasts.
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type, before anything is written.
local epoch = counter_read(3)
local seq, fields = history_last(4)
local delay = KEYS[6] and ARGV[9]
if delay then
    delay_check(6)
end
if on_key(1, 'hlen') == 0 then
    local left = delay and delay_left(6) or 0
    if left > 0 then
        -- The vacancy is written now, at the lapse, so the term that follows the delay measures
        -- the vacancy from here.
        history_settle(4, seq, fields, history_now(), KEYS[5], ARGV[5])
        return {left, 'delayed'}
    end
    local wait = claim_pass(2, ARGV[2], ARGV[4])
    if wait then
        return wait
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if delay then
        delay_extend(6, KEYS[1], ARGV[2], delay)
    end
    epoch = redis.call('incr', KEYS[3])
    local at = history_now()
    seq = history_settle(4, seq, fields, at, KEYS[5], ARGV[5])
    local vacant = -1
    if fields.event == 'vacant' then
        vacant = math.max(at - tonumber(fields.at), 0)
    elseif seq then
        vacant = 0
    end
    history_add(4, seq, at, KEYS[5], ARGV[5], 'event', 'elected', 'epoch', epoch,
        'leader', ARGV[2], 'pid', ARGV[6], 'host', ARGV[7], 'program', ARGV[8], 'since', at,
        'metadata', ARGV[10] or '')
    return {epoch, vacant}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return {epoch or 0, -1}
end
local ttl = redis.call('pttl', KEYS[1])
local priority = tonumber(ARGV[3])
if priority > 0 then
    claim_take(2, priority, ARGV[2], ttl, ARGV[4])
end
return ttl
