-- End an election's term whoever leads (an operator's override): delete its lock and lock-delay,
-- write the vacancy (`forced`) to history, and wake a waiting candidate.
-- Needs: common/counter, common/claim, election/history
-- Flags: allow-oom
--
-- KEYS[1]  the election's lock hash relock_election:<name>
-- KEYS[2]  the candidates' wake-up channel redisson_lock__channel:{<lock>}
-- KEYS[3]  the hand-off claim relock_claim:{<lock>}
-- KEYS[4]  the lock-delay's shadow lease relock_lease:{<lock>}: deleted, so the election is free
--          at once, ending any lock-delay in force
-- KEYS[5]  the epoch counter redisson_lock_token:{<lock>}
-- KEYS[6]  the history relock_election_log:{<lock>}
-- KEYS[7]  the change channel relock_election_changes:{<lock>}
-- ARGV[1]  the message that wakes candidates ("0")
-- ARGV[2]  the publish command: PUBLISH or SPUBLISH
-- ARGV[3]  the claim window in ms: a claim lives at most this much longer
--
-- Reply:   1 when a term was ended, or, nobody leading, a lock-delay in force was; 0 when
--          there was neither.
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type, before anything is written.
local leads = on_key(1, 'hlen') > 0
local shadow = on_key(4, 'pttl') > 0
local epoch = counter_read(5)
local seq, fields = history_last(6)
claim_check(3)
if not leads and not shadow then
    return 0
end
redis.call('del', KEYS[1], KEYS[4])
claim_cut(KEYS[3], ARGV[3])
if leads then
    history_add(6, seq, history_now(), KEYS[7], ARGV[2],
        'event', 'vacant', 'epoch', epoch or fields.epoch or 0, 'reason', 'forced')
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
