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
-- ARGV[2]  the ID from which to read history (`<seq>-0`, the caller's seq + 1, as text); '': only
--          the newest entry
-- ARGV[3]  the most entries to return (0: none)
-- ARGV[4]  the ID of the entry the caller delivered last (`<seq>-0`), to return as it is now;
--          '': none
--
-- Reply:   {leader field or false, the lease's PTTL (-2: nobody leads), the epoch counter (0:
--          none), the newest seq in history as text ('0': it is empty), {entries...}, {the
--          entry at ARGV[4]} or {} when there is none (or none was asked for), the oldest seq
--          in history as text ('0': it is empty)}, each entry as XRANGE gives it ({id, {field,
--          value, ...}}).
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type, before anything is written.
local holders = on_key(1, 'hkeys')
local epoch = counter_read(2) or 0
local seq, fields = history_last(3)
if #holders == 0 then
    history_settle(3, seq, fields, history_now(), KEYS[4], ARGV[1])
end
local newest = redis.call('xrevrange', KEYS[3], '+', '-', 'COUNT', 1)
local oldest = redis.call('xrange', KEYS[3], '-', '+', 'COUNT', 1)
local entries = {}
if ARGV[2] == '' then
    entries = newest
elseif tonumber(ARGV[3]) > 0 then
    entries = redis.call('xrange', KEYS[3], ARGV[2], '+', 'COUNT', ARGV[3])
end
local delivered = {}
if ARGV[4] ~= '' then
    delivered = redis.call('xrange', KEYS[3], ARGV[4], ARGV[4])
end
local function seq_of(list)
    return list[1] and string.match(list[1][1], '^([0-9]+)%-') or '0'
end
return {holders[1] or false, redis.call('pttl', KEYS[1]), epoch, seq_of(newest), entries,
    delivered, seq_of(oldest)}
