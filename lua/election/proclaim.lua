-- Proclaim the leader's metadata within its term, written to history.
-- Needs: common/counter, election/history
--
-- KEYS[1]  the election's lock hash relock_election:<name>
-- KEYS[2]  the epoch counter redisson_lock_token:{<lock>}
-- KEYS[3]  the history relock_election_log:{<lock>}
-- KEYS[4]  the change channel relock_election_changes:{<lock>}
-- ARGV[1]  the leader's holder field
-- ARGV[2]  the metadata
-- ARGV[3]  the publish command: PUBLISH or SPUBLISH
-- ARGV[4]  the leader's pid, ARGV[5] its host, ARGV[6] its program (for a history that lost
--          the term's earlier entries)
--
-- Reply:   the new entry's seq, or nil when the field does not lead.
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type, before anything is written.
if on_key(1, 'hexists', ARGV[1]) == 0 then
    return nil
end
local epoch = counter_read(2) or 0
local seq, fields = history_last(3)
local at = history_now()
local ours = fields.leader == ARGV[1] and tonumber(fields.epoch) == epoch
return history_add(3, seq, at, KEYS[4], ARGV[3], 'event', 'proclaimed', 'epoch', epoch,
    'leader', ARGV[1], 'pid', ours and fields.pid or ARGV[4],
    'host', ours and fields.host or ARGV[5], 'program', ours and fields.program or ARGV[6],
    'since', ours and fields.since or '', 'metadata', ARGV[2])
