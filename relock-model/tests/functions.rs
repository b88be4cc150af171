//! Redis 7 functions on the simulated server: `FUNCTION LOAD | DELETE | FLUSH | LIST`, `FCALL`
//! and `FCALL_RO`, with relock's own library (as the library loads it at connect) and small
//! libraries of the same shape (top-level locals shared by callbacks registered with flags);
//! then the same commands through the conformance mirror in front of a real `redis-server`,
//! which must find no difference.

use relock::testing::scripts::{LOCK_ACQUIRE, LOCK_RELEASE};
use relock::testing::RedisServer;
use relock_model::server::lua::sha1_hex;
use relock_model::server::{Reply, Server, Version};

#[path = "support/mirror.rs"]
mod support;
use support::Mirror;

const ME: &str = "11111111-2222-3333-4444-555555555555:task-1";
const OTHER: &str = "99999999-8888-7777-6666-555555555555:task-2";

/// relock's function library, exactly as this build's client loads it: `build.rs` writes its
/// body (with `@ID@` for its id) to the library crate's `OUT_DIR`; the body whose SHA1 gives
/// [`relock::library_name`] is this build's.
fn relock_library() -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> → target/<profile>/build/redis-relock-*/out/library.lua
    let build = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("build");
    let entries = std::fs::read_dir(&build).expect("target/<profile>/build");
    for entry in entries.flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .starts_with("redis-relock-")
        {
            continue;
        }
        let Ok(body) = std::fs::read_to_string(entry.path().join("out/library.lua")) else {
            continue;
        };
        let id = &sha1_hex(body.as_bytes())[..16];
        let name = format!("relock_{id}");
        if name == relock::library_name() {
            return format!("#!lua name={name}\n{}", body.replace("@ID@", id));
        }
    }
    panic!(
        "no library.lua under {} hashes to {}",
        build.display(),
        relock::library_name()
    );
}

/// The function of relock's library that runs the catalogue's script `script` (`lock_acquire`).
fn relock_function(script: &str) -> String {
    format!("{}_{script}", relock::library_name())
}

/// A library of the shape relock's has: top-level locals, assigned by each callback, that the
/// callbacks share; functions registered with the table form and flags, and one positional.
const COUNTER_LIBRARY: &str = "#!lua name=counters
local KEYS, ARGV, CALLS
local calls = 0
local function count()
    calls = calls + 1
    return calls
end
redis.register_function{function_name = 'counters_bump', flags = {'allow-oom'}, callback = function(keys, args)
    KEYS, ARGV, CALLS = keys, args, {}
    redis.call('set', KEYS[1], ARGV[1])
    return count()
end}
redis.register_function{function_name = 'counters_read', flags = {'no-writes'}, description = 'reads', callback = function(keys, args)
    KEYS, ARGV = keys, args
    return {count(), redis.call('get', KEYS[1])}
end}
redis.register_function{function_name = 'counters_sneak', flags = {'no-writes'}, callback = function(keys, args)
    return redis.call('del', keys[1])
end}
redis.register_function{function_name = 'counters_try', flags = {'no-writes'}, callback = function(keys, args)
    return redis.pcall('set', keys[1], 'x')
end}
redis.register_function('counters_plain', function(keys, args)
    return calls
end)
";

fn error(text: &str) -> Reply {
    Reply::Error(text.into())
}

fn fcall(
    server: &mut Server,
    command: &str,
    function: &str,
    keys: &[&str],
    args: &[&str],
) -> Reply {
    let numkeys = keys.len().to_string();
    let mut call = vec![command, function, numkeys.as_str()];
    call.extend(keys);
    call.extend(args);
    server.command(&call)
}

#[test]
fn relocks_library_loads_and_its_functions_answer_as_its_scripts_do() {
    let library = relock_library();
    let mut by_function = Server::new(Version::Redis7);
    let mut by_script = Server::new(Version::Redis7);
    assert_eq!(
        by_function.command(&["FUNCTION", "LOAD", &library]),
        Reply::bulk(relock::library_name())
    );
    // A second client of the same build: the library is there already.
    assert_eq!(
        by_function.command(&["FUNCTION", "LOAD", &library]),
        error(&format!(
            "ERR Library '{}' already exists",
            relock::library_name()
        ))
    );
    let acquire = relock_function("lock_acquire");
    let release = relock_function("lock_release");
    let keys = ["lock", "relock_claim:{lock}"];
    let release_keys = |request: &'static str| {
        [
            "lock",
            "redisson_lock__channel:{lock}",
            request,
            "relock_claim:{lock}",
        ]
    };
    let release_args = ["0", "10000", ME, "PUBLISH", "8000", "500", "0", "0"];
    for (at, field, priority) in [(0, ME, "0"), (5, ME, "0"), (1_000, OTHER, "1")] {
        by_function.advance_to(at);
        by_script.advance_to(at);
        let args = ["10000", field, priority, "500"];
        assert_eq!(
            fcall(&mut by_function, "FCALL", &acquire, &keys, &args),
            by_script.eval(LOCK_ACQUIRE, &keys, &args)
        );
        assert_eq!(by_function.keyspace, by_script.keyspace);
    }
    for request in [
        "redisson_unlock_latch:{lock}:r1",
        "redisson_unlock_latch:{lock}:r2",
    ] {
        let keys = release_keys(request);
        assert_eq!(
            fcall(&mut by_function, "FCALL", &release, &keys, &release_args),
            by_script.eval(LOCK_RELEASE, &keys, &release_args)
        );
        assert_eq!(by_function.keyspace, by_script.keyspace);
    }
    assert_eq!(by_function.command(&["EXISTS", "lock"]), Reply::Int(0));
    // A script that writes goes by FCALL only; one flagged no-writes by FCALL_RO too.
    assert_eq!(
        fcall(
            &mut by_function,
            "FCALL_RO",
            &acquire,
            &keys,
            &["1", ME, "0", "5"]
        ),
        error("ERR Can not execute a script with write flag using *_ro command.")
    );
    by_function.command(&["SET", "permits", "3"]);
    let counter = relock_function("counter");
    assert_eq!(
        fcall(&mut by_function, "FCALL_RO", &counter, &["permits"], &[]),
        Reply::Int(3)
    );
    assert_eq!(
        fcall(&mut by_function, "FCALL", &counter, &["permits"], &[]),
        Reply::Int(3)
    );
    // A key of another type: the fragment's error table is the reply, as from the script.
    by_function.command(&["SET", "lock", "text"]);
    by_script.command(&["SET", "lock", "text"]);
    let args = ["10000", ME, "0", "500"];
    let reply = fcall(&mut by_function, "FCALL", &acquire, &keys, &args);
    assert!(
        matches!(&reply, Reply::Error(e) if e.starts_with("WRONGTYPE")),
        "{reply}"
    );
    assert_eq!(reply, by_script.eval(LOCK_ACQUIRE, &keys, &args));
    // FUNCTION LIST names the library and its functions with their flags.
    let Reply::Array(list) = by_function.command(&["FUNCTION", "LIST"]) else {
        panic!("FUNCTION LIST answers an array");
    };
    assert_eq!(list.len(), 1);
    let Reply::Array(fields) = &list[0] else {
        panic!("a library is a map");
    };
    assert_eq!(
        fields[..4],
        [
            Reply::bulk("library_name"),
            Reply::bulk(relock::library_name()),
            Reply::bulk("engine"),
            Reply::bulk("LUA"),
        ]
    );
    let Reply::Array(functions) = &fields[5] else {
        panic!("its functions");
    };
    let counter_entry = Reply::Array(vec![
        Reply::bulk("name"),
        Reply::bulk(&counter),
        Reply::bulk("description"),
        Reply::Nil,
        Reply::bulk("flags"),
        Reply::Array(vec![Reply::Status("no-writes".into())]),
    ]);
    assert!(functions.contains(&counter_entry));
}

#[test]
fn functions_write_read_only_refuse_writes_and_share_their_librarys_locals() {
    let mut server = Server::new(Version::Redis7);
    assert_eq!(
        server.command(&["FUNCTION", "LOAD", COUNTER_LIBRARY]),
        Reply::bulk("counters")
    );
    // A function that writes, and the library's locals kept from one call to the next.
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_bump", &["k"], &["v"]),
        Reply::Int(1)
    );
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_bump", &["k"], &["w"]),
        Reply::Int(2)
    );
    assert_eq!(server.command(&["GET", "k"]), Reply::bulk("w"));
    // Function names are found whatever their case.
    assert_eq!(
        fcall(&mut server, "fcall", "COUNTERS_PLAIN", &[], &[]),
        Reply::Int(2)
    );
    // A write function by FCALL_RO: refused before it runs.
    assert_eq!(
        fcall(&mut server, "FCALL_RO", "counters_bump", &["k"], &["x"]),
        error("ERR Can not execute a script with write flag using *_ro command.")
    );
    assert_eq!(server.command(&["GET", "k"]), Reply::bulk("w"));
    // A no-writes function by FCALL_RO or FCALL.
    let read = Reply::Array(vec![Reply::Int(3), Reply::bulk("w")]);
    assert_eq!(
        fcall(&mut server, "FCALL_RO", "counters_read", &["k"], &[]),
        read
    );
    let read = Reply::Array(vec![Reply::Int(4), Reply::bulk("w")]);
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_read", &["k"], &[]),
        read
    );
    // A write command inside a no-writes function, whichever command called it.
    for command in ["FCALL", "FCALL_RO"] {
        assert_eq!(
            fcall(&mut server, command, "counters_sneak", &["k"], &[]),
            error("ERR Write commands are not allowed from read-only scripts.")
        );
        assert_eq!(
            fcall(&mut server, command, "counters_try", &["k"], &[]),
            error("ERR Write commands are not allowed from read-only scripts.")
        );
    }
    assert_eq!(server.command(&["GET", "k"]), Reply::bulk("w"));
    // EVAL_RO is read-only too.
    assert_eq!(
        server.command(&["EVAL_RO", "return redis.call('del', KEYS[1])", "1", "k"]),
        error("ERR Write commands are not allowed from read-only scripts.")
    );
    // Unknown functions and bad key counts.
    assert_eq!(
        fcall(&mut server, "FCALL", "nope", &[], &[]),
        error("ERR Function not found")
    );
    assert_eq!(
        server.command(&["FCALL", "counters_plain", "x"]),
        error("ERR Bad number of keys provided")
    );
    assert_eq!(
        server.command(&["FCALL", "counters_plain", "2", "a"]),
        error("ERR Number of keys can't be greater than number of args")
    );
    assert_eq!(
        server.command(&["FCALL", "counters_plain"]),
        error("ERR wrong number of arguments for 'fcall' command")
    );
}

#[test]
fn libraries_load_replace_delete_and_flush_as_redis_does() {
    let mut server = Server::new(Version::Redis7);
    assert_eq!(
        server.command(&["FUNCTION", "LOAD", COUNTER_LIBRARY]),
        Reply::bulk("counters")
    );
    assert_eq!(
        server.command(&["FUNCTION", "LOAD", COUNTER_LIBRARY]),
        error("ERR Library 'counters' already exists")
    );
    // Another library may not register a function of the same name (in any case).
    let clash =
        "#!lua name=other\nredis.register_function('COUNTERS_PLAIN', function() return 1 end)";
    assert_eq!(
        server.command(&["FUNCTION", "LOAD", clash]),
        error("ERR Function COUNTERS_PLAIN already exists")
    );
    // REPLACE: the library's functions are the new text's, its locals new.
    fcall(&mut server, "FCALL", "counters_bump", &["k"], &["v"]);
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_plain", &[], &[]),
        Reply::Int(1)
    );
    let replaced = "#!lua name=counters\nlocal calls = 100\nredis.register_function('counters_plain', function() calls = calls + 1 return calls end)";
    assert_eq!(
        server.command(&["FUNCTION", "LOAD", "REPLACE", replaced]),
        Reply::bulk("counters")
    );
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_plain", &[], &[]),
        Reply::Int(101)
    );
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_plain", &[], &[]),
        Reply::Int(102)
    );
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_bump", &["k"], &["v"]),
        error("ERR Function not found")
    );
    // Libraries are no keys: FLUSHALL and SCRIPT FLUSH leave them.
    server.command(&["FLUSHALL"]);
    server.command(&["SCRIPT", "FLUSH"]);
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_plain", &[], &[]),
        Reply::Int(103)
    );
    // DELETE, then FLUSH.
    assert_eq!(
        server.command(&["FUNCTION", "DELETE", "nope"]),
        error("ERR Library not found")
    );
    assert_eq!(
        server.command(&["FUNCTION", "DELETE", "counters"]),
        Reply::ok()
    );
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_plain", &[], &[]),
        error("ERR Function not found")
    );
    server.command(&["FUNCTION", "LOAD", COUNTER_LIBRARY]);
    assert_eq!(server.command(&["FUNCTION", "FLUSH", "ASYNC"]), Reply::ok());
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_plain", &[], &[]),
        error("ERR Function not found")
    );
    assert_eq!(server.command(&["FUNCTION", "LIST"]), Reply::Array(vec![]));
    // A restart without persistence loses them; one that reloads its AOF keeps them.
    server.command(&["FUNCTION", "LOAD", COUNTER_LIBRARY]);
    server.restart_keeping_data();
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_plain", &[], &[]),
        Reply::Int(0)
    );
    server.restart_empty();
    assert_eq!(
        fcall(&mut server, "FCALL", "counters_plain", &[], &[]),
        error("ERR Function not found")
    );
    // Load errors, as Redis 7.0 words them.
    for (code, expected) in [
        ("return 1", "ERR Missing library metadata"),
        ("#!lua", "ERR Invalid library metadata"),
        ("#!lua\nreturn 1", "ERR Library name was not given"),
        ("#!js name=x\nreturn 1", "ERR Engine 'js' not found"),
        ("#!lua name=x-y\nreturn 1", "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"),
        ("#!lua name=x\nlocal y = 1", "ERR No functions registered"),
        ("#!lua name=x\nreturn 1 +", "ERR Error compiling function: user_function:2: unexpected symbol near '<eof>'"),
        ("#!lua name=x\nredis.call('ping')", "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'"),
        ("#!lua name=x\nx = 1", "ERR Error registering functions: ERR user_function:2: Attempt to modify a readonly table"),
        ("#!lua name=x\nredis.register_function{function_name = 'f', callback = function() end, flags = {'bad'}}", "ERR Error registering functions: ERR unknown flag given"),
    ] {
        assert_eq!(server.command(&["FUNCTION", "LOAD", code]), error(expected), "{code}");
    }
    // A script's syntax error, worded as a library's is (without mlua's own prefix).
    assert_eq!(
        server.command(&["EVAL", "return 1 +", "0"]),
        error("ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'")
    );
    // A function may not run FCALL, FUNCTION or EVAL.
    let nested = "#!lua name=nested\nredis.register_function('nested', function() return redis.call('fcall', 'nested', 0) end)";
    server.command(&["FUNCTION", "LOAD", nested]);
    assert_eq!(
        fcall(&mut server, "FCALL", "nested", &[], &[]),
        error("ERR This Redis command is not allowed from script")
    );
}

#[test]
fn redis_6_has_no_functions() {
    let mut server = Server::new(Version::Redis6);
    assert_eq!(
        server.command(&["FUNCTION", "LOAD", COUNTER_LIBRARY]),
        error(&format!(
            "ERR unknown command `FUNCTION`, with args beginning with: `LOAD`, `{}`, ",
            &COUNTER_LIBRARY[..128 - "`LOAD`, ".len()]
        ))
    );
    assert_eq!(
        server.command(&["fcall", "f", "0"]),
        error("ERR unknown command `fcall`, with args beginning with: `f`, `0`, ")
    );
}

/// `FCALL`'s arguments: the command, the function, the key count, the keys, the arguments.
fn fcall_args<'a>(
    command: &'a str,
    function: &'a str,
    numkeys: &'a str,
    rest: &[&'a str],
) -> Vec<&'a str> {
    let mut call = vec![command, function, numkeys];
    call.extend(rest);
    call
}

#[test]
fn the_mirror_finds_the_simulated_functions_as_redis_7s() {
    let server = RedisServer::start().expect("redis-server");
    let mirror = Mirror::start(&server, "functions");
    let library = relock_library();
    let name = relock::library_name();
    assert_eq!(
        mirror.cmd(&["FUNCTION", "LOAD", &library]),
        format!("${}\r\n{name}\r\n", name.len())
    );
    assert!(mirror
        .cmd(&["FUNCTION", "LOAD", &library])
        .contains("already exists"));
    let acquire = relock_function("lock_acquire");
    let release = relock_function("lock_release");
    let counter = relock_function("counter");
    let keys = ["lock", "relock_claim:{lock}"];
    let mine = [keys[0], keys[1], "10000", ME, "0", "500"];
    assert_eq!(
        mirror.cmd(&fcall_args("FCALL", &acquire, "2", &mine)),
        "$-1\r\n"
    );
    assert_eq!(
        mirror.cmd(&fcall_args("FCALL", &acquire, "2", &mine)),
        "$-1\r\n"
    );
    let other = [keys[0], keys[1], "10000", OTHER, "1", "500"];
    assert!(mirror
        .cmd(&fcall_args("FCALL", &acquire, "2", &other))
        .starts_with(':'));
    let release_rest = |request: &'static str| {
        [
            "lock",
            "redisson_lock__channel:{lock}",
            request,
            "relock_claim:{lock}",
            "0",
            "10000",
            ME,
            "PUBLISH",
            "8000",
            "500",
            "0",
            "0",
        ]
    };
    let first = release_rest("redisson_unlock_latch:{lock}:r1");
    assert_eq!(
        mirror.cmd(&fcall_args("FCALL", &release, "4", &first)),
        ":0\r\n"
    );
    // The last hold: the lock is freed (the reply says whether a claimant waits).
    let second = release_rest("redisson_unlock_latch:{lock}:r2");
    assert!(mirror
        .cmd(&fcall_args("FCALL", &release, "4", &second))
        .starts_with(':'));
    assert_eq!(mirror.cmd(&["EXISTS", "lock"]), ":0\r\n");
    assert!(mirror
        .cmd(&fcall_args("FCALL_RO", &acquire, "2", &mine))
        .starts_with("-ERR Can not execute a script with write flag"));
    mirror.cmd(&["SET", "permits", "3"]);
    assert_eq!(
        mirror.cmd(&fcall_args("FCALL_RO", &counter, "1", &["permits"])),
        ":3\r\n"
    );
    mirror.cmd(&["SET", "lock", "text"]);
    assert!(mirror
        .cmd(&fcall_args("FCALL", &acquire, "2", &mine))
        .starts_with("-WRONGTYPE"));

    // The small library: locals shared across calls from different connections, read-only
    // refusals, FUNCTION LIST of two libraries (in the real server's order), REPLACE, DELETE,
    // FLUSH.
    assert_eq!(
        mirror.cmd(&["FUNCTION", "LOAD", COUNTER_LIBRARY]),
        "$8\r\ncounters\r\n"
    );
    assert_eq!(
        mirror.cmd(&["FCALL", "counters_bump", "1", "k", "v"]),
        ":1\r\n"
    );
    assert_eq!(
        mirror.cmd(&["FCALL", "counters_bump", "1", "k", "w"]),
        ":2\r\n"
    );
    assert_eq!(
        mirror.cmd(&["FCALL_RO", "counters_read", "1", "k"]),
        "*2\r\n:3\r\n$1\r\nw\r\n"
    );
    assert!(mirror
        .cmd(&["FCALL_RO", "counters_bump", "1", "k", "x"])
        .starts_with("-ERR Can not execute a script with write flag"));
    assert!(mirror
        .cmd(&["FCALL", "counters_sneak", "1", "k"])
        .starts_with("-ERR Write commands are not allowed from read-only scripts. script: counters_sneak, on @user_function:"));
    assert_eq!(
        mirror.cmd(&["FCALL", "counters_try", "1", "k"]),
        "-ERR Write commands are not allowed from read-only scripts.\r\n"
    );
    assert_eq!(
        mirror.cmd(&["FCALL", "nope", "0"]),
        "-ERR Function not found\r\n"
    );
    assert!(mirror.cmd(&["FUNCTION", "LIST"]).starts_with("*2\r\n"));
    assert!(mirror
        .cmd(&["FUNCTION", "LIST", "LIBRARYNAME", "count*", "WITHCODE"])
        .starts_with("*1\r\n"));
    assert_eq!(mirror.cmd(&["FLUSHALL"]), "+OK\r\n");
    assert_eq!(mirror.cmd(&["FCALL", "counters_plain", "0"]), ":3\r\n");
    let replaced = "#!lua name=counters\nlocal calls = 100\nredis.register_function('counters_plain', function() calls = calls + 1 return calls end)";
    assert_eq!(
        mirror.cmd(&["FUNCTION", "LOAD", "REPLACE", replaced]),
        "$8\r\ncounters\r\n"
    );
    assert_eq!(mirror.cmd(&["FCALL", "counters_plain", "0"]), ":101\r\n");
    assert_eq!(mirror.cmd(&["FUNCTION", "DELETE", "counters"]), "+OK\r\n");
    assert_eq!(
        mirror.cmd(&["FUNCTION", "DELETE", "counters"]),
        "-ERR Library not found\r\n"
    );
    assert_eq!(mirror.cmd(&["FUNCTION", "FLUSH"]), "+OK\r\n");
    assert_eq!(
        mirror.cmd(&fcall_args("FCALL", &counter, "1", &["permits"])),
        "-ERR Function not found\r\n"
    );
    assert_eq!(mirror.cmd(&["FUNCTION", "LIST"]), "*0\r\n");
    assert_eq!(
        mirror.report(),
        "",
        "the simulated functions agree with Redis's"
    );
}
