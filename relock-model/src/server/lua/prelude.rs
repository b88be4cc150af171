//! The Lua side of Redis's scripting, as the text each interpreter runs when it is set up:
//! `redis.call` and `redis.pcall`, the trampoline every script and function runs through, and
//! the loader of a function library with `redis.register_function`.

use crate::server::Version;

/// The `redis` library's Lua side: `redis.call` raises a command's error (Redis 7 as the error
/// table, Redis 6 as its text), `redis.pcall` returns it; both reach the server through
/// `redis.__raw`, set for each run. Then the trampoline every script and function runs
/// through: it tells an error table from a string. Then the loader of a function library
/// (Redis 7.0's `function_lua.c`): it runs the library's chunk in an environment of the
/// library's own, which only Redis's load API backs (`redis.register_function`, `redis.log`,
/// the log levels and the version) until the chunk returned, and the scripts' globals after
/// (without `KEYS` and `ARGV`), both read-only, a missing name an error, as Redis's are.
pub(super) fn library(version: Version) -> String {
    let raise = match version {
        Version::Redis7 => "error(reply, 0)",
        Version::Redis6 => "error(reply.err, 0)",
    };
    format!(
        r#"
redis.pcall = function(...) return redis.__raw(...) end
redis.call = function(...)
    local reply = redis.__raw(...)
    if type(reply) == 'table' and reply.err ~= nil then
        {raise}
    end
    return reply
end
local pcall, error, type, tostring, select, pairs = pcall, error, type, tostring, select, pairs
local rawget, setmetatable, setfenv, lower, match = rawget, setmetatable, setfenv, string.lower, string.match
local G = _G

local function trampoline(f, ...)
    local ok, result = pcall(f, ...)
    if ok then
        return true, result, nil
    end
    if type(result) == 'table' then
        return false, true, tostring(result.err)
    end
    return false, false, tostring(result)
end

local function readonly()
    error('Attempt to modify a readonly table', 2)
end
local function nonexistent(name)
    return "Script attempted to access nonexistent global variable '" .. tostring(name) .. "'"
end
local function fail(message)
    error({{err = 'ERR ' .. message}})
end
local function is_string(v)
    return type(v) == 'string' or type(v) == 'number'
end
local FLAGS = {{['no-writes'] = 1, ['allow-oom'] = 2, ['allow-stale'] = 4, ['no-cluster'] = 8,
    ['allow-cross-slot-keys'] = 16}}

-- What the chunk being loaded registered so far (nil: no load runs).
local registering = nil

local function register_function(...)
    if registering == nil then
        fail('redis.register_function can only be called on FUNCTION LOAD command')
    end
    local argc = select('#', ...)
    if argc < 1 or argc > 2 then
        fail('wrong number of arguments to redis.register_function')
    end
    local name, callback, flags, description = nil, nil, 0, nil
    if argc == 1 then
        local named = ...
        if type(named) ~= 'table' then
            fail('calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).')
        end
        for key, value in pairs(named) do
            if not is_string(key) then
                fail('named argument key given to redis.register_function is not a string')
            end
            key = lower(tostring(key))
            if key == 'function_name' then
                if not is_string(value) then
                    fail('function_name argument given to redis.register_function must be a string')
                end
                name = tostring(value)
            elseif key == 'description' then
                if not is_string(value) then
                    fail('description argument given to redis.register_function must be a string')
                end
                description = tostring(value)
            elseif key == 'callback' then
                if type(value) ~= 'function' then
                    fail('callback argument given to redis.register_function must be a function')
                end
                callback = value
            elseif key == 'flags' then
                if type(value) ~= 'table' then
                    fail('flags argument to redis.register_function must be a table representing function flags')
                end
                local seen = {{}}
                local i = 1
                while value[i] ~= nil do
                    local flag = value[i]
                    local bit = is_string(flag) and FLAGS[lower(tostring(flag))]
                    if not bit then
                        fail('unknown flag given')
                    end
                    if not seen[bit] then
                        seen[bit] = true
                        flags = flags + bit
                    end
                    i = i + 1
                end
            else
                fail('unknown argument given to redis.register_function')
            end
        end
        if name == nil then
            fail('redis.register_function must get a function name argument')
        end
        if callback == nil then
            fail('redis.register_function must get a callback argument')
        end
    else
        local first, second = ...
        if not is_string(first) then
            fail('first argument to redis.register_function must be a string')
        end
        if type(second) ~= 'function' then
            fail('second argument to redis.register_function must be a function')
        end
        name, callback = tostring(first), second
    end
    if not match(name, '^[a-zA-Z0-9_]+$') then
        fail('Library names can only contain letters, numbers, or underscores(_) and must be at least one character long')
    end
    for _, known in pairs(registering) do
        if known.name == name then
            fail('Function already exists in the library')
        end
    end
    registering[#registering + 1] = {{name = name, callback = callback, flags = flags,
        description = description}}
end

-- The `redis` table a library's chunk sees while it loads.
local load_api = {{register_function = register_function}}
for _, field in pairs({{'log', 'LOG_DEBUG', 'LOG_VERBOSE', 'LOG_NOTICE', 'LOG_WARNING',
        'REDIS_VERSION', 'REDIS_VERSION_NUM'}}) do
    load_api[field] = redis[field]
end
local load_redis = setmetatable({{}}, {{
    __index = function(_, name)
        local value = load_api[name]
        if value == nil then
            error(nonexistent(name), 2)
        end
        return value
    end,
    __newindex = readonly,
}})
local function load_index(_, name)
    if name == 'redis' then
        return load_redis
    end
    error(nonexistent(name), 2)
end
local function runtime_index(_, name)
    if name ~= 'KEYS' and name ~= 'ARGV' then
        local value = rawget(G, name)
        if value ~= nil then
            return value
        end
    end
    error(nonexistent(name), 2)
end

local function load_library(chunk)
    local meta = {{__index = load_index, __newindex = readonly}}
    setfenv(chunk, setmetatable({{}}, meta))
    registering = {{}}
    local ok, err = pcall(chunk)
    local registered = registering
    registering = nil
    meta.__index = runtime_index
    if ok then
        return true, registered
    end
    if type(err) == 'table' then
        return false, tostring(err.err)
    end
    return false, 'ERR ' .. tostring(err)
end

return trampoline, load_library
"#
    )
}
