//! The conformance mirror itself, in front of a real `redis-server`: it passes replies through,
//! agrees where the simulated server answers as Redis does, and reports where it does not.

use relock::testing::RedisServer;

#[path = "support/mirror.rs"]
mod support;
use support::Mirror;

#[test]
fn relocks_scripts_agree_and_a_command_the_simulation_lacks_is_reported() {
    let server = RedisServer::start().expect("redis-server");
    let mirror = Mirror::start(&server, "test");
    let acquire = relock::testing::scripts::LOCK_ACQUIRE;
    let field = "11111111-2222-3333-4444-555555555555:1";
    let args = [
        "EVAL",
        acquire,
        "2",
        "m",
        "relock_claim:{m}",
        "10000",
        field,
        "0",
        "500",
    ];
    assert_eq!(mirror.cmd(&args), "$-1\r\n");
    assert_eq!(mirror.cmd(&["HGET", "m", field]), "$1\r\n1\r\n");
    // The real server has the hold: the mirror passed the script through.
    assert_eq!(
        server.command(&["HGET", "m", field]).unwrap(),
        "$1\r\n1\r\n"
    );
    assert_eq!(mirror.report(), "", "relock's acquire agrees");

    // APPEND is no command of the simulated server: the real one answers, the mirror reports.
    assert_eq!(mirror.cmd(&["APPEND", "s", "abc"]), ":3\r\n");
    let report = mirror.report();
    assert!(report.contains("\"APPEND\" \"s\" \"abc\""), "{report}");
    assert!(
        report.contains("sim reply:  -ERR unknown command 'append'"),
        "{report}"
    );
    assert!(
        report.contains("key \"s\":\n  real: string \"abc\""),
        "{report}"
    );
}
