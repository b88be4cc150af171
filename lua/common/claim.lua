-- The hand-off claim relock_claim:{<name>}: a STRING "<priority>:<holder field>" with an expiry,
-- naming the waiter that the lock's next free moment is promised to. Written and read only
-- here, so every script agrees on its format. Redisson does not read claims, so its clients
-- may take a claimed lock. A claim relock did not write (no "<n>:" prefix, or no expiry) is
-- ignored. Needs lua/common/counter.lua before it: the claim is read with `on_key`, so a claim
-- key of another type fails the script, naming the key, before it writes.

-- The priority and holder field that claim text `value` names, or nil when it is not
-- "<priority>:<field>".
local function claim_parse(value)
    local priority, field = string.match(value, '^(%d+):(.+)$')
    if not priority then
        return nil
    end
    return tonumber(priority), field
end

-- The claim in KEYS[i]: its priority and field, or nil when there is none that relock wrote.
-- Fails the script with a WRONGTYPE naming KEYS[i] when it holds another type.
local function claim_read(i)
    local value = on_key(i, 'get')
    if not value or redis.call('pttl', KEYS[i]) < 0 then
        return nil
    end
    return claim_parse(value)
end

-- Fails the script with a WRONGTYPE naming KEYS[i] when the claim key holds another type: for a
-- script that writes before it reads the claim.
local function claim_check(i)
    on_key(i, 'strlen')
end

-- Claims KEYS[i] for `field` with `priority` (above 0), unless another field's claim has a
-- priority as high: for `ttl` (the lease the claimant waits on, in ms; below 0 counts as 0)
-- plus the claim window `window` in ms.
local function claim_take(i, priority, field, ttl, window)
    local held, claimant = claim_read(i)
    if not claimant or claimant == field or priority > held then
        redis.call('set', KEYS[i], priority .. ':' .. field, 'px', math.max(ttl, 0) + tonumber(window))
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


-- On a free lock, whether `field` may take it now: nil when it may (its own claim, if it had
-- one, is used up and deleted), else how long to wait in ms, as claim_wait says, while another
-- field's claim in KEYS[i] holds the lock for it.
local function claim_pass(i, field, window)
    local _, claimant = claim_read(i)
    if claimant and claimant ~= field then
        return claim_wait(KEYS[i], window)
    end
    if claimant then
        redis.call('del', KEYS[i])
    end
    return nil
end
