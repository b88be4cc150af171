-- The hand-off claim relock_claim:{<name>}: a STRING "<priority>:<holder field>" with an expiry,
-- naming the waiter that the lock's next free moment is promised to. Written and read only
-- here, so every script agrees on its format. Redisson does not read claims, so its clients
-- may take a claimed lock. A claim relock did not write (no "<n>:" prefix, or no expiry) is
-- ignored.

-- The priority and holder field that claim text `value` names, or nil when it is not
-- "<priority>:<field>".
local function claim_parse(value)
    local priority, field = string.match(value, '^(%d+):(.+)$')
    if not priority then
        return nil
    end
    return tonumber(priority), field
end

-- The claim in `key`: its priority and field, or nil when there is none that relock wrote.
local function claim_read(key)
    local value = redis.call('get', key)
    if not value or redis.call('pttl', key) < 0 then
        return nil
    end
    return claim_parse(value)
end

-- Claims `key` for `field` with `priority` (above 0), unless another field's claim has a
-- priority as high: for `ttl` (the lease the claimant waits on, in ms; below 0 counts as 0)
-- plus the claim window `window` in ms.
local function claim_take(key, priority, field, ttl, window)
    local held, claimant = claim_read(key)
    if not claimant or claimant == field or priority > held then
        redis.call('set', key, priority .. ':' .. field, 'px', math.max(ttl, 0) + tonumber(window))
    end
end

-- On a free lock, a claim by another field keeps the lock for it, but for the claim window
-- `window` in ms at most (a claimant that died holds it back no longer): the claim in `key` is
-- cut to the window, and the reply is how long to wait, in ms, at least 1.
local function claim_wait(key, window)
    local left = redis.call('pttl', key)
    if left > tonumber(window) then
        redis.call('pexpire', key, window)
        left = tonumber(window)
    end
    return math.max(left, 1)
end

-- The lock was freed: its claim in `key` lives the claim window `window` in ms at most, so a
-- claimant that died delays the others by no more than that.
local function claim_cut(key, window)
    if redis.call('pttl', key) > tonumber(window) then
        redis.call('pexpire', key, window)
    end
end

