-- Resign: give an election's term back, write its vacancy (`resigned`) to history, and wake a
-- waiting candidate. Also a shutdown's release of the term (which writes no replay key).
-- Needs: common/counter, common/claim, common/delay, common/replay, election/history
-- Flags: allow-oom
--
-- KEYS[1]  the election's lock hash relock_election:<name>
-- KEYS[2]  the candidates' wake-up channel redisson_lock__channel:{<lock>}
-- KEYS[3]  the replay key redisson_unlock_latch:{<lock>}:<request-id> (lua/common/replay.lua)
-- KEYS[4]  the hand-off claim relock_claim:{<lock>}
-- KEYS[5]  the epoch counter redisson_lock_token:{<lock>}
-- KEYS[6]  the history relock_election_log:{<lock>}
-- KEYS[7]  the change channel relock_election_changes:{<lock>}
-- KEYS[8]  (with a lock-delay only) the shadow lease relock_lease:{<lock>}: deleted (a resign
--          imposes no lock-delay)
-- ARGV[1]  the message that wakes candidates ("0": one per process)
-- ARGV[2]  the publish command: PUBLISH or SPUBLISH
-- ARGV[3]  the leader's holder field
-- ARGV[4]  how long a replay key lives, in ms
-- ARGV[5]  the claim window in ms: a claim lives at most this much longer once the term is free
-- ARGV[6]  1 when this request may have reached the server before (its replay key is read)
-- ARGV[7]  1 when the release writes a replay key (its retry then replays 1)
--
-- Reply:   nil when the field does not lead (not this candidate's term, or, on a retry, given
--          back by this request's first send); else 1 + the connections the candidates' wake-up
--          reached.
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type, before anything is written.
local replayed, reply = replay_read(3, ARGV[6])
if replayed then
    return reply
end
if on_key(1, 'hexists', ARGV[3]) == 0 then
    return nil
end
local epoch = counter_read(5)
local seq = history_last(6)
claim_check(4)
if KEYS[8] then
    delay_check(8)
end
redis.call('del', KEYS[1])
if KEYS[8] then
    redis.call('del', KEYS[8])
end
claim_cut(KEYS[4], ARGV[5])
history_add(6, seq, history_now(), KEYS[7], ARGV[2],
    'event', 'vacant', 'epoch', epoch or 0, 'reason', 'resigned')
local woken = redis.call(ARGV[2], KEYS[2], ARGV[1])
if ARGV[7] == '1' then
    replay_write(KEYS[3], 1, ARGV[4])
end
return 1 + woken
