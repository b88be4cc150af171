//! The simulated server on its own: relock's scripts, Redis's conversions and error rules.

use relock::testing::scripts::{LOCK_ACQUIRE, LOCK_RELEASE};
use relock_model::server::{Reply, Server, Version};

const ME: &str = "11111111-2222-3333-4444-555555555555:task-1";
const OTHER: &str = "99999999-8888-7777-6666-555555555555:task-2";

fn acquire(server: &mut Server, field: &str, priority: &str) -> Reply {
    let keys = ["lock", "relock_claim:{lock}"];
    server.eval(LOCK_ACQUIRE, &keys, &["10000", field, priority, "500"])
}

#[test]
fn a_lock_is_taken_reentered_refused_and_released_with_a_wake_up() {
    for version in [Version::Redis7, Version::Redis6] {
        let mut server = Server::new(version);
        server.subscribe(b"redisson_lock__channel:{lock}");
        assert_eq!(acquire(&mut server, ME, "0"), Reply::Nil);
        assert_eq!(acquire(&mut server, ME, "0"), Reply::Nil);
        assert_eq!(server.command(&["HGET", "lock", ME]), Reply::bulk("2"));
        server.advance_to(1_000);
        // Busy: the reply is the lease left, and OTHER claims the next hand-off.
        assert_eq!(acquire(&mut server, OTHER, "1"), Reply::Int(9_000));
        assert_eq!(
            server.command(&["GET", "relock_claim:{lock}"]),
            Reply::bulk(format!("1:{OTHER}"))
        );
        let keys = [
            "lock",
            "redisson_lock__channel:{lock}",
            "redisson_unlock_latch:{lock}:r1",
            "relock_claim:{lock}",
        ];
        let args = ["0", "10000", ME, "PUBLISH", "8000", "500", "0", "0"];
        assert_eq!(server.eval(LOCK_RELEASE, &keys, &args), Reply::Int(0));
        let keys2 = [
            "lock",
            "redisson_lock__channel:{lock}",
            "redisson_unlock_latch:{lock}:r2",
            "relock_claim:{lock}",
        ];
        assert_eq!(server.eval(LOCK_RELEASE, &keys2, &args), Reply::Int(2));
        assert_eq!(server.command(&["EXISTS", "lock"]), Reply::Int(0));
        assert_eq!(
            server.command(&["PTTL", "relock_claim:{lock}"]),
            Reply::Int(500)
        );
        assert_eq!(
            server.take_published(),
            vec![(b"redisson_lock__channel:{lock}".to_vec(), b"0".to_vec())]
        );
        // ME may not take it during OTHER's claim; OTHER may.
        assert_eq!(acquire(&mut server, ME, "0"), Reply::Int(500));
        assert_eq!(acquire(&mut server, OTHER, "0"), Reply::Nil);
    }
}

#[test]
fn a_key_of_another_type_fails_the_script_with_its_place_and_nothing_written() {
    for version in [Version::Redis7, Version::Redis6] {
        let mut server = Server::new(version);
        server.command(&["SET", "relock_claim:{lock}", "x"]);
        server.command(&["SET", "lock", "user-data"]);
        let reply = acquire(&mut server, ME, "0");
        let Reply::Error(message) = &reply else {
            panic!("{reply:?}")
        };
        assert!(
            message.starts_with("WRONGTYPE") && message.ends_with("[key 1]"),
            "{message}"
        );
        assert_eq!(server.command(&["GET", "lock"]), Reply::bulk("user-data"));
    }
}

#[test]
fn redis_conversions_and_errors() {
    let mut server = Server::new(Version::Redis7);
    let reply = server.eval(
        "return {1, 'a', false, 3.7, {ok='fine'}, redis.error_reply('E x')}",
        &[] as &[&str],
        &[] as &[&str],
    );
    assert_eq!(
        reply,
        Reply::Array(vec![
            Reply::Int(1),
            Reply::bulk("a"),
            Reply::Nil,
            Reply::Int(3),
            Reply::Status("fine".into()),
            Reply::Error("E x".into())
        ])
    );
    server.command(&["SET", "s", "v"]);
    let reply = server.eval(
        "return redis.call('hget', KEYS[1], 'f')",
        &["s"],
        &[] as &[&str],
    );
    assert!(
        matches!(&reply, Reply::Error(m) if m.starts_with("WRONGTYPE")),
        "{reply:?}"
    );
    let reply = server.eval(
        "local r = redis.pcall('hget', KEYS[1], 'f') return r.err",
        &["s"],
        &[] as &[&str],
    );
    assert!(
        matches!(&reply, Reply::Bulk(m) if m.starts_with(b"WRONGTYPE")),
        "{reply:?}"
    );
    // A script's writes before its error stay.
    let reply = server.eval(
        "redis.call('set', 'w', 1) error('boom')",
        &[] as &[&str],
        &[] as &[&str],
    );
    assert!(
        matches!(&reply, Reply::Error(m) if m.starts_with("ERR user_script:1: boom")),
        "{reply:?}"
    );
    assert_eq!(server.command(&["GET", "w"]), Reply::bulk("1"));
    let sha = relock_model::server::lua::sha1_hex(b"return 1");
    assert!(
        matches!(server.command(&["EVALSHA", &sha, "0"]), Reply::Error(m) if m.starts_with("NOSCRIPT"))
    );
    assert_eq!(
        server.command(&["SCRIPT", "LOAD", "return 1"]),
        Reply::bulk(&sha)
    );
    assert_eq!(server.command(&["EVALSHA", &sha, "0"]), Reply::Int(1));
}
