-- A lock is a hash: a script that meets another type under a lock's name refuses it as Redis's
-- own hash commands do, and never deletes it (it may be a user's key).

-- 'none' when `key` does not exist, 'hash' when it is a hash; for any other type, nil and the
-- WRONGTYPE error reply to return.
local function hash_type(key)
    local kind = redis.call('type', key)['ok']
    if kind == 'none' or kind == 'hash' then
        return kind
    end
    return nil, redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end

