-- An election's history: the STREAM relock_election_log:{<election lock>}, one entry per change,
-- written by the same script that makes the change, so history and state never disagree. An
-- entry's ID is `<seq>-0`, seq counting the changes from 1 (a reader asks for what follows the
-- seq it saw, and a jump in seq is history it missed); its fields are `event` (`elected`,
-- `proclaimed` or `vacant`), `epoch`, `at` (the server's time in ms), `stamp`, and by event: the
-- leader's `leader` (holder field), `pid`, `host`, `program`, `since` (ms) and `metadata` for
-- `elected` and `proclaimed` (each entry of a term repeats them, so the newest entry alone says
-- who leads), `reason` (`resigned`, `lapsed`, `forced`) for `vacant`. The stream keeps about the
-- newest HISTORY_LENGTH entries. Each change is published (its seq) on the election's change
-- channel.
--
-- A new entry's seq follows the stream's last ID as Redis keeps it (XINFO STREAM's
-- `last-generated-id`, which survives XDEL and XTRIM), so no seq is ever given twice in one
-- stream and XADD never refuses the ID (a change whose lock and epoch are written is never left
-- without its entry). A stream deleted (DEL, a server that lost its data) starts again at seq 1.
--
-- `stamp` tells one history from another: 16 hex digits of the SHA1 of the stamp of the entry it
-- followed (the newest when it was written; '' for none, or one written before stamps), its seq
-- and its fields. Two histories whose entries at a seq have the same stamp agree up to there, so
-- a reader that keeps the stamp of the last entry it delivered knows whether the history it
-- reads now is the one it read (not rewritten by a failover that lost entries, nor deleted and
-- grown again). Entries written before stamps have none.
-- Needs lua/common/counter.lua before it: the stream is read with `on_key`, so a key of another
-- type fails the script, naming it, before the script writes.

local HISTORY_LENGTH = 1000

-- The greatest seq a stream ID can hold (2^64 - 1), as text.
local HISTORY_SEQ_MAX = '18446744073709551615'

-- The stamp of the newest entry of each history read or written by this run, by KEYS index (in
-- `CALL`, the run's own table).
local function history_stamps()
    if not CALL.history_stamps then
        CALL.history_stamps = {}
    end
    return CALL.history_stamps
end

-- The newest entry of history KEYS[i]: its seq and its fields as a table, or nil when there is
-- none.
local function history_last(i)
    local newest = on_key(i, 'xrevrange', '+', '-', 'COUNT', 1)[1]
    if not newest then
        return nil, {}
    end
    local fields = {}
    local list = newest[2]
    for j = 1, #list, 2 do
        fields[list[j]] = list[j + 1]
    end
    history_stamps()[i] = fields.stamp or ''
    return tonumber(string.match(newest[1], '^([0-9]+)%-')), fields
end

-- The server's time in ms.
local function history_now()
    local now = redis.call('time')
    return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- The decimal text `digits` plus one.
local function history_increment(digits)
    local k = #digits
    while k >= 1 and string.sub(digits, k, k) == '9' do
        k = k - 1
    end
    if k == 0 then
        return '1' .. string.rep('0', #digits)
    end
    return string.sub(digits, 1, k - 1) .. (tonumber(string.sub(digits, k, k)) + 1)
        .. string.rep('0', #digits - k)
end

-- The seq of the next entry of history KEYS[i], as text: one past the ms part of the last ID
-- the stream ever gave (1 for a stream that does not exist). A stream whose last ID leaves no
-- seq after it (someone wrote the greatest ID) is deleted and starts again at 1.
local function history_next(i)
    if redis.call('exists', KEYS[i]) == 0 then
        return '1'
    end
    local info = redis.call('xinfo', 'stream', KEYS[i])
    local last = '0'
    for j = 1, #info, 2 do
        if info[j] == 'last-generated-id' then
            last = string.match(info[j + 1], '^([0-9]+)%-') or '0'
        end
    end
    local next = history_increment(last)
    if #next > #HISTORY_SEQ_MAX or (#next == #HISTORY_SEQ_MAX and next > HISTORY_SEQ_MAX) then
        redis.call('del', KEYS[i])
        history_stamps()[i] = ''
        return '1'
    end
    return next
end

-- The stamp of history KEYS[i]'s newest entry ('' for none, or one without a stamp).
local function history_stamp(i)
    local stamp = history_stamps()[i]
    if stamp == nil then
        local newest = redis.call('xrevrange', KEYS[i], '+', '-', 'COUNT', 1)[1]
        stamp = ''
        if newest then
            local list = newest[2]
            for j = 1, #list, 2 do
                if list[j] == 'stamp' then
                    stamp = list[j + 1]
                end
            end
        end
    end
    return stamp
end

-- Appends a change (field, value, ... after `at`) to history KEYS[i], whose newest entry is
-- `seq` (nil: none; the new entry's seq follows the stream's last ID, which is at least that),
-- and publishes its seq on `channel` with `publish` ('' publishes nothing). Returns the new
-- entry's seq.
local function history_add(i, seq, at, channel, publish, ...)
    local next = history_next(i)
    local fields = {'at', at, ...}
    local text = {}
    for j = 1, select('#', ...) + 2 do
        text[j] = tostring(fields[j])
    end
    local stamp = string.sub(redis.sha1hex(history_stamp(i) .. '\n' .. next .. '\n'
        .. table.concat(text, '\n')), 1, 16)
    fields[#text + 1] = 'stamp'
    fields[#text + 2] = stamp
    redis.call('xadd', KEYS[i], 'MAXLEN', '~', HISTORY_LENGTH, next .. '-0',
        unpack(fields, 1, #text + 2))
    history_stamps()[i] = stamp
    if publish ~= '' then
        redis.call(publish, channel, next)
    end
    return tonumber(next)
end

-- When the newest entry (`seq`, `fields`, as history_last gave them) is of a term and nobody
-- leads any more, the term ended without a resign (its lease ran out, or its key was deleted):
-- writes its vacancy, `lapsed`. Returns the newest seq after it.
local function history_settle(i, seq, fields, at, channel, publish)
    if seq and fields.event ~= 'vacant' then
        return history_add(i, seq, at, channel, publish,
            'event', 'vacant', 'epoch', fields.epoch, 'reason', 'lapsed')
    end
    return seq
end
