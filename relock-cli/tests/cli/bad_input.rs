//! Bad input: a clear message, an exit code, and nothing changed.

use super::*;

#[tokio::test]
async fn bad_input_gets_a_clear_message_an_exit_code_and_changes_nothing() {
    let mut gone = RedisServer::start();
    let unreachable = gone.url();
    gone.kill();
    let out = relock(&unreachable, &["ls"]).await;
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("cannot connect"), "{}", stderr(&out));

    let locked = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let out = relock(&locked.url(), &["ls"]).await;
    assert_eq!(code(&out), 1);
    let message = stderr(&out).to_lowercase();
    assert!(
        message.contains("auth") || message.contains("password"),
        "{message}"
    );

    let server = RedisServer::start();
    let url = server.url();
    let client = common::client(&server, WATCHDOG).await;
    let base = common::prefix("cli-bad");
    // A lock hash written without a TTL never frees by itself: show says so.
    // (Outside `{base}:*`, which the listing below counts.)
    let forever = format!("{base}-forever");
    server.cmd(&[
        "HSET",
        &forever,
        "2f1c8a52-0b7e-4d2a-9a31-5e0f8d1c2b3a:57",
        "1",
    ]);
    let text = stdout(&relock(&url, &["show", &forever]).await);
    assert!(
        text.contains("no expiry: this lock never frees by itself"),
        "{text}"
    );
    let user = format!("{base}:user");
    server.cmd(&["SET", &user, "{\"id\":1}"]);
    let out = relock(&url, &["show", &user]).await;
    assert_eq!(code(&out), 3);
    assert!(
        stderr(&out).contains("is a string, not a lock"),
        "{}",
        stderr(&out)
    );
    let out = relock(&url, &["show", &format!("{base}:absent")]).await;
    assert_eq!(code(&out), 3);
    let out = relock(&url, &["unlock", &user, "--force", "--yes"]).await;
    assert_eq!(code(&out), 3);
    assert_eq!(
        common::resp(&server.cmd(&["GET", &user])),
        common::Resp::Bulk(Some("{\"id\":1}".into()))
    );

    let name = format!("{base}:held");
    let _held = common::hold(&client, &name).await;
    let out = relock(&url, &["unlock", &name]).await;
    assert_eq!(code(&out), 2, "unlock without --force is a usage error");
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    let out = relock(&url, &["unlock", &name, "--force"]).await;
    assert_eq!(code(&out), 2, "no terminal and no --yes");
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    assert!(common::raw_exists(&server, &name), "nothing was unlocked");
    let out = relock(&url, &["show", ""]).await;
    assert_ne!(code(&out), 0);
    let out = relock(&url, &["watch", &name, "--interval", "0"]).await;
    assert_eq!(code(&out), 2);
    let out = relock(&url, &["--url", "http://example.com", "ls"]).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let out = relock(&url, &["frobnicate"]).await;
    assert_eq!(code(&out), 2);
    // `--help` never shows the URL from the environment: it may carry a password.
    let secret = "redis://:hunter2@127.0.0.1:1";
    let help = relock(secret, &["--help"]).await;
    assert_eq!(code(&help), 0);
    assert!(!stdout(&help).contains("hunter2"), "{}", stdout(&help));

    // A pattern that matches 100,000 keys: the listing stops at --limit, and writes nothing.
    for chunk in 0..100 {
        let mut args = vec!["MSET".to_owned()];
        for i in 0..1000 {
            args.push(format!("{base}:bulk:{chunk}:{i}"));
            args.push("x".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        server.cmd(&args);
    }
    for i in 0..5 {
        let _ =
            std::mem::ManuallyDrop::new(common::hold(&client, format!("{base}:many:{i}")).await);
    }
    let keys_before = common::resp_int(&server.cmd(&["DBSIZE"]));
    let text = stdout(&relock(&url, &["ls", &format!("{base}:*"), "--limit", "2"]).await);
    assert!(text.contains("stopped at --limit 2"), "{text}");
    let cut = json(&url, &["ls", &format!("{base}:*"), "--limit", "2"]).await;
    assert_eq!(cut["items"].as_array().unwrap().len(), 2);
    assert_eq!(cut["more"], true);
    let all = json(&url, &["ls", &format!("{base}:*")]).await;
    assert_eq!(all["items"].as_array().unwrap().len(), 6, "{all}");
    assert!(all["keys_seen"].as_u64().unwrap() >= 100_000);
    assert_eq!(common::resp_int(&server.cmd(&["DBSIZE"])), keys_before);
    let out = relock(&url, &["ls", &format!("{base}:nomatch:*")]).await;
    assert_eq!(code(&out), 3);
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
}
