-- Run a batch of script calls of many tasks as one script: each call's script on its own keys and arguments, each call's error kept to itself.
-- Wraps: every script
--
-- The client puts this loop after a function `script(place)` that makes the catalogue script at
-- that place (from 1) as a function of its KEYS and ARGV (src/scripts/combine/mod.rs), and sends
-- calls that overlapped on a connection as one EVALSHA of the whole. Each script a batch calls is
-- made once, when the batch first calls it. The calls run in order; a call's error (an error reply
-- or a raised error) is its own reply and does not stop the others, and a write made before it
-- stays made, as it would in a call of its own.
--
-- KEYS     every call's keys, call after call
-- ARGV[1]  the number of calls; then, per call: its script's place in `scripts` (from 1), its
--          number of keys, its number of arguments, and its arguments
-- Returns one reply per call, in order: {1, reply}; {2} for a nil reply; {0, error text}.
local replies, made = {}, {}
local key, arg = 1, 2
for call = 1, tonumber(ARGV[1]) do
    local place = tonumber(ARGV[arg])
    local run = made[place]
    if not run then
        run = script(place)
        made[place] = run
    end
    local key_count, arg_count = tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2])
    arg = arg + 3
    local keys, args = {}, {}
    for i = 1, key_count do
        keys[i] = KEYS[key]
        key = key + 1
    end
    for i = 1, arg_count do
        args[i] = ARGV[arg]
        arg = arg + 1
    end
    local ok, reply = pcall(run, keys, args)
    if not ok then
        if type(reply) == 'table' and reply.err then
            reply = reply.err
        end
        replies[call] = {0, tostring(reply)}
    elseif type(reply) == 'table' and reply.err then
        replies[call] = {0, reply.err}
    elseif reply == nil or reply == false then
        replies[call] = {2}
    else
        replies[call] = {1, reply}
    end
end
return replies
