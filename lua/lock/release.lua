-- Release one hold of a reentrant lock; the last hold deletes the lock and wakes a waiter.
-- Needs: common/counter, common/claim, common/replay, common/delay
-- Flags: allow-oom
--
-- A release that leaves holds behind writes a replay key, so that its retry after a lost reply
-- does not count it twice. The last release writes one only when ARGV[8] asks, which saves the
-- server a write and a delete on most lock + unlock pairs: its retry finds the field gone and
-- returns nil, which the client takes for "freed by the first send". The client asks for the key
-- whenever that could be wrong: when the hold could lapse before the last retry, or when an
-- acquire by the same owner was in flight as the release started (it holds the owner's later
-- acquires of the lock back until the release has its reply).
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the wake-up channel redisson_lock__channel:{<name>}
-- KEYS[3]  the replay key redisson_unlock_latch:{<name>}:<request-id>
-- KEYS[4]  the hand-off claim relock_claim:{<name>}
-- KEYS[5]  (a lock with a lock-delay only) the shadow lease relock_lease:{<name>}
--          (lua/common/delay.lua): a release that leaves holds sets it to outlive the lock by
--          ARGV[9]; the last release deletes it (a clean release imposes no delay)
-- ARGV[1]  the message to publish on the last release ("0": wake one waiter per process)
-- ARGV[2]  the TTL in ms to set while holds remain: what the owner's remaining holds need (the
--          client knows each hold's lease; see `src/registry/holds.rs`); 0 when no hold of the
--          owner's may remain: the release frees the lock whatever the field's count (a count
--          the client does not know of, a hold it lost locally while Redis still had it, must
--          not outlive the owner's last release)
-- ARGV[3]  holder field <client-uuid>:<owner>
-- ARGV[4]  the publish command: PUBLISH (or SPUBLISH on a sharded cluster); empty: publish
--          nothing (a spin lock: its waiters poll)
-- ARGV[5]  how long a replay key lives, in ms
-- ARGV[6]  the claim window in ms: on the last release a claim lives at most this much longer,
--          so a claimant that died delays the others by no more than that
-- ARGV[7]  1 when this request may have reached the server before (a retry after a lost reply,
--          or a release finished in the background): its replay key is read first; 0 on the
--          request's first send, whose replay key cannot exist yet, so the read is skipped
-- ARGV[8]  1 when the last release writes a replay key too (its hold could lapse before the
--          request's last retry, or an acquire by the same owner was in flight when the release
--          started, and may run after it); 0: only a release that leaves holds behind writes one
-- ARGV[9]  (with KEYS[5]) the lock-delay in ms
--
-- Reply:   nil when the field holds nothing (not held by this owner, or, on a retry, freed
--          by this request's first send), 0 when holds remain, 1 + n when the lock was freed
--          and its wake-up reached n subscribed connections (the caller learns whether other
--          processes are waiting). A request that wrote a replay key replays 0 (holds remained)
--          or 1 (freed), so a retried release counts once.
-- Errors:  WRONGTYPE when <name> exists but is not a hash.
local replayed, reply = replay_read(3, ARGV[7])
if replayed then
    return reply
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if KEYS[5] then
    delay_check(5)
end
local holds = 0
if ARGV[2] ~= '0' then
    holds = redis.call('hincrby', KEYS[1], ARGV[3], -1)
end
if holds > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    if KEYS[5] then
        delay_extend(5, KEYS[1], ARGV[3], ARGV[9])
    end
    replay_write(KEYS[3], 0, ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
if KEYS[5] then
    redis.call('del', KEYS[5])
end
claim_cut(KEYS[4], ARGV[6])
local woken = 0
if ARGV[4] ~= '' then
    woken = redis.call(ARGV[4], KEYS[2], ARGV[1])
end
if ARGV[8] == '1' then
    replay_write(KEYS[3], 1, ARGV[5])
end
return 1 + woken
