//! `relock` on an election: `ls`, `show` (its leader, epoch, metadata, since when), `watch`
//! (its changes from history) and `unlock --force`.

use super::*;

/// An election shows as one: `ls` and `show` give its type, leader (with its process) and
/// epoch; `unlock --force` ends the term, and the next campaign's epoch is higher.
#[tokio::test]
async fn ls_show_and_unlock_an_election() {
    let server = RedisServer::start();
    let url = server.url();
    let client = common::client(&server, WATCHDOG).await;
    let name = common::prefix("cli-election");
    let term = client.election(&name).campaign().await.unwrap();
    term.proclaim("10.1.2.3:7000").await.unwrap();
    let key = format!("relock_election:{name}");
    let listed = json(&url, &["ls", "relock_election:*"]).await;
    let items = listed["items"].as_array().unwrap();
    assert!(
        items
            .iter()
            .any(|i| i["name"] == key.as_str() && i["type"] == "election"),
        "{listed}"
    );
    let seen = json(&url, &["show", &key]).await;
    assert_eq!(seen["type"], "election", "{seen}");
    assert_eq!(seen["token"], term.epoch(), "{seen}");
    assert_eq!(seen["holders"][0]["client_id"], client.id());
    assert_eq!(seen["holders"][0]["process"]["pid"], std::process::id());
    assert_eq!(seen["election"]["metadata"], "10.1.2.3:7000", "{seen}");
    assert_eq!(seen["election"]["epoch"], term.epoch(), "{seen}");
    assert!(seen["election"]["since_ms"].as_u64().unwrap() > 0, "{seen}");
    let shown = stdout(&relock(&url, &["show", &key]).await);
    assert!(
        shown
            .lines()
            .any(|l| l.contains("metadata") && l.contains("10.1.2.3:7000")),
        "{shown}"
    );
    assert!(shown.contains("leads since"), "{shown}");
    // Its changes: the newest first, then each as it comes.
    let (mut watch, mut lines) = spawn_watch(&url, &key);
    let first: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    assert_eq!(
        (&first["seq"], &first["event"], &first["metadata"]),
        (&json!(2), &json!("proclaimed"), &json!("10.1.2.3:7000")),
        "{first}"
    );
    let mut text_watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_relock"))
        .args(["watch", &key, "--after", "0"])
        .env("REDIS_URL", &url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut text_lines = BufReader::new(text_watch.stdout.take().unwrap()).lines();
    let earlier = [
        next_line(&mut text_lines).await,
        next_line(&mut text_lines).await,
    ];
    text_watch.start_kill().unwrap();
    assert!(
        earlier[0].starts_with("#1 ") && earlier[0].contains("elected"),
        "{earlier:?}"
    );
    assert!(
        earlier[1].starts_with("#2 ") && earlier[1].contains("10.1.2.3:7000"),
        "{earlier:?}"
    );
    let table = stdout(&relock(&url, &["ls", "relock_election:*"]).await);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&key) && l.contains("election")),
        "{table}"
    );

    let out = relock(&url, &["unlock", &key, "--force", "--yes"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(client.election(&name).leader().await.unwrap(), None);
    let next = client.election(&name).campaign().await.unwrap();
    assert!(next.epoch() > term.epoch());
    let lapsed: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    assert_eq!(
        (&lapsed["seq"], &lapsed["event"], &lapsed["reason"]),
        (&json!(3), &json!("vacant"), &json!("forced")),
        "{lapsed}"
    );
    let elected: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    assert_eq!(
        (&elected["seq"], &elected["event"], &elected["epoch"]),
        (&json!(4), &json!("elected"), &json!(next.epoch())),
        "{elected}"
    );
    watch.start_kill().unwrap();
}
