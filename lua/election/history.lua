-- An election's history: the STREAM relock_election_log:{<election lock>}, one entry per change,
-- written by the same script that makes the change, so history and state never disagree. An
-- entry's ID is `<seq>-0`, seq counting the changes from 1 (a reader asks for what follows the
-- seq it saw, and a jump in seq is history it missed); its fields are `event` (`elected`,
-- `proclaimed` or `vacant`), `epoch`, `at` (the server's time in ms), and by event: the
-- leader's `leader` (holder field), `pid`, `host`, `program`, `since` (ms) and `metadata` for
-- `elected` and `proclaimed` (each entry of a term repeats them, so the newest entry alone says
-- who leads), `reason` (`resigned`, `lapsed`) for `vacant`. The stream keeps about the newest
-- HISTORY_LENGTH entries. Each change is published (its seq) on the election's change channel.
-- Needs lua/common/counter.lua before it: the stream is read with `on_key`, so a key of another
-- type fails the script, naming it, before the script writes.

local HISTORY_LENGTH = 1000

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
    return tonumber(string.match(newest[1], '^([0-9]+)%-')), fields
end

-- The server's time in ms.
local function history_now()
    local now = redis.call('time')
    return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- Appends a change (field, value, ... after `at`) to history KEYS[i], whose newest entry is
-- `seq` (nil: none), and publishes its seq on `channel` with `publish` ('' publishes nothing).
-- Returns the new entry's seq.
local function history_add(i, seq, at, channel, publish, ...)
    local next = (seq or 0) + 1
    redis.call('xadd', KEYS[i], 'MAXLEN', '~', HISTORY_LENGTH, next .. '-0', 'at', at, ...)
    if publish ~= '' then
        redis.call(publish, channel, next)
    end
    return next
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
