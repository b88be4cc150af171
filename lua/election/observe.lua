-- Read an election: who leads, and its history after a seq. A term that ended without a resign
-- (its lease ran out, or its key was deleted) gets its vacancy written here if nobody wrote it
-- yet, so a watcher that reads at a lease's end reports it.
-- Needs: common/counter, election/history
--
-- KEYS[1]  the election's lock hash relock_election:<name>
-- KEYS[2]  the epoch counter redisson_lock_token:{<lock>}
-- KEYS[3]  the history relock_election_log:{<lock>}
-- KEYS[4]  the change channel relock_election_changes:{<lock>}
-- ARGV[1]  the publish command: PUBLISH or SPUBLISH
-- ARGV[2]  the seq after which to read history; -1: only the newest entry
-- ARGV[3]  the most entries to return
--
-- Reply:   {leader field or false, the lease's PTTL (-2: nobody leads), the epoch counter (0:
--          none), the newest seq in history (0: it is empty), {entries...}}, each entry as
--          XRANGE gives it ({id, {field, value, ...}}).
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type, before anything is written.
local holders = on_key(1, 'hkeys')
local epoch = counter_read(2) or 0
local seq, fields = history_last(3)
if #holders == 0 then
    seq = history_settle(3, seq, fields, history_now(), KEYS[4], ARGV[1])
end
local entries
if tonumber(ARGV[2]) < 0 then
    entries = redis.call('xrevrange', KEYS[3], '+', '-', 'COUNT', 1)
else
    entries = redis.call('xrange', KEYS[3], (tonumber(ARGV[2]) + 1) .. '-0', '+', 'COUNT', ARGV[3])
end
return {holders[1] or false, redis.call('pttl', KEYS[1]), epoch, seq or 0, entries}
