//! An election's history under what can rewrite or damage it: a history rewritten behind a
//! watcher, a deleted or trimmed newest entry, seqs no history can reach.

use crate::common;

use std::time::Duration;

use futures::StreamExt;
use relock::{Cursor, Watch};

use super::election_watch::{history, key, line, next};
use common::RedisServer;

/// The next `n` changes of `watch`, one line each.
async fn lines(watch: &mut Watch, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for _ in 0..n {
        lines.push(line(&next(watch).await));
    }
    lines
}

/// History as Redis holds it, read with raw commands: `<id> <event> <epoch>[ <reason or
/// metadata>]` per entry.
fn entries(server: &RedisServer, name: &str) -> Vec<String> {
    let script = "local out = {} \
        for _, e in ipairs(redis.call('xrange', KEYS[1], '-', '+')) do \
            local f = {} \
            for j = 1, #e[2], 2 do f[e[2][j]] = e[2][j + 1] end \
            local extra = f.reason or f.metadata or '' \
            if extra ~= '' then extra = ' ' .. extra end \
            out[#out + 1] = e[1] .. ' ' .. f.event .. ' ' .. f.epoch .. extra \
        end \
        return table.concat(out, ';')";
    let reply = server.cmd(&["EVAL", script, "1", &history(name)]);
    // A bulk string: `$<len>\r\n<text>\r\n`.
    let text = reply.split("\r\n").nth(1).unwrap_or_default();
    text.split(';')
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A failover that lost the newest change, simulated by hand: history is rewritten to hold its
/// first entry only (what a replica that had not received the second would hold). The leader
/// still leads there and proclaims again: the new proclaim takes seq 2 in the new history. A
/// watcher that had delivered the lost seq 2 reports a gap, then the new seq 2.
#[tokio::test]
async fn a_history_rewritten_behind_a_watch_at_the_same_length_is_a_gap() {
    let (server, client, name) = common::setup("history_rewrite", Duration::from_secs(30)).await;
    let election = client.election(&name);
    let term = election.campaign().await.unwrap();
    assert_eq!(term.proclaim("a").await.unwrap(), 2);
    let mut watch = election.watch();
    assert_eq!(
        lines(&mut watch, 1).await,
        [format!("2 proclaimed {} a", term.epoch())]
    );

    let keep_first = "local first = redis.call('xrange', KEYS[1], '1-0', '1-0')[1] \
        redis.call('del', KEYS[1]) \
        return redis.call('xadd', KEYS[1], first[1], unpack(first[2]))";
    server.cmd(&["EVAL", keep_first, "1", &history(&name)]);
    assert_eq!(term.proclaim("b").await.unwrap(), 2);
    let epoch = term.epoch();
    assert_eq!(
        entries(&server, &name),
        [
            format!("1-0 elected {epoch}"),
            format!("2-0 proclaimed {epoch} b")
        ]
    );
    assert_eq!(
        lines(&mut watch, 2).await,
        ["gap 2 2".to_owned(), format!("2 proclaimed {epoch} b")]
    );
    // It follows the new history from there.
    term.resign().await.unwrap();
    assert_eq!(
        lines(&mut watch, 1).await,
        [format!("3 vacant {epoch} Resigned")]
    );
}

/// History deleted and grown again past the place a watcher had delivered, while the watcher
/// was not polled: it reports a gap, then the new history's newest change, not the new changes
/// after its old place as if they followed what it delivered.
#[tokio::test]
async fn a_history_deleted_and_grown_past_a_watch_is_a_gap() {
    let (server, client, name) = common::setup("history_regrown", Duration::from_secs(30)).await;
    let election = client.election(&name);
    let term = election.campaign().await.unwrap();
    term.proclaim("a").await.unwrap();
    term.resign().await.unwrap();
    let mut watch = election.watch();
    assert_eq!(lines(&mut watch, 1).await, ["3 vacant 1 Resigned"]);

    server.cmd(&["DEL", &history(&name)]);
    let term = election.campaign().await.unwrap();
    term.proclaim("b").await.unwrap();
    term.resign().await.unwrap();
    let term = election.campaign().await.unwrap();
    assert_eq!(term.epoch(), 3);
    assert_eq!(entries(&server, &name).len(), 4);
    assert_eq!(lines(&mut watch, 2).await, ["gap 3 4", "4 elected 3"]);
    term.resign().await.unwrap();
    assert_eq!(lines(&mut watch, 1).await, ["5 vacant 3 Resigned"]);
}

/// A cursor kept as text resumes a watch on the history it was taken from, without a gap; on
/// another history (another election's, with as many changes) it is a gap, then that history's
/// newest change. A bare seq cannot tell the two apart.
#[tokio::test]
async fn watch_after_a_cursor_of_another_history_is_a_gap() {
    let (_server, client, name) = common::setup("history_cursor", Duration::from_secs(30)).await;
    let first = client.election(&name);
    let term = first.campaign().await.unwrap();
    term.proclaim("a").await.unwrap();
    let mut watch = first.watch();
    let seen = next(&mut watch).await;
    assert_eq!(line(&seen), "2 proclaimed 1 a");
    let kept = seen.cursor().expect("a change has a cursor").to_string();
    let cursor: Cursor = kept.parse().unwrap();
    assert_eq!((cursor.seq(), cursor.stamp().is_some()), (2, true));

    let other = client.election(format!("{name}-other"));
    let other_term = other.campaign().await.unwrap();
    other_term.proclaim("x").await.unwrap();
    other_term.proclaim("y").await.unwrap();
    let mut resumed = other.watch_after(cursor.clone());
    assert_eq!(
        lines(&mut resumed, 2).await,
        ["gap 2 3", "3 proclaimed 1 y"]
    );
    // A bare seq has nothing to check.
    let mut bare = other.watch_after(2);
    assert_eq!(lines(&mut bare, 1).await, ["3 proclaimed 1 y"]);

    let mut same = first.watch_after(cursor);
    term.resign().await.unwrap();
    assert_eq!(lines(&mut same, 1).await, ["3 vacant 1 Resigned"]);
    other_term.resign().await.unwrap();
}

/// The newest entry deleted (`XDEL`), then the leader resigns and another campaigns: each
/// change is written after the deleted entry's seq (the stream's last ID), none fails, and the
/// epoch grows by one.
#[tokio::test]
async fn a_deleted_newest_entry_does_not_wedge_the_election() {
    let (server, first, second, name) =
        common::setup_two("history_xdel", Duration::from_secs(30)).await;
    let term = first.election(&name).campaign().await.unwrap();
    let epoch = term.epoch();
    assert_eq!(term.proclaim("a").await.unwrap(), 2);
    let mut watch = second.election(&name).watch();
    assert_eq!(
        lines(&mut watch, 1).await,
        [format!("2 proclaimed {epoch} a")]
    );
    server.cmd(&["XDEL", &history(&name), "2-0"]);

    term.resign().await.unwrap();
    let next_term = second.election(&name).campaign().await.unwrap();
    assert_eq!(next_term.epoch(), epoch + 1);
    assert_eq!(next_term.proclaim("b").await.unwrap(), 5);
    assert_eq!(
        entries(&server, &name),
        [
            format!("1-0 elected {epoch}"),
            format!("3-0 vacant {epoch} resigned"),
            format!("4-0 elected {}", epoch + 1),
            format!("5-0 proclaimed {} b", epoch + 1),
        ]
    );
    // The watcher had delivered the deleted entry: a gap, then history from its newest.
    let seen = lines(&mut watch, 2).await;
    assert_eq!(seen[0], "gap 2 5", "{seen:?}");
    assert_eq!(seen[1], format!("5 proclaimed {} b", epoch + 1));
    next_term.resign().await.unwrap();
}

/// History trimmed to nothing (`XTRIM MAXLEN 0`), then the leader dies (its key gone, as at its
/// lease's end) and another campaigns: the term is granted with the next epoch and written
/// after the trimmed entries' seqs.
#[tokio::test]
async fn a_history_trimmed_to_nothing_does_not_wedge_the_election() {
    let (server, first, second, name) =
        common::setup_two("history_xtrim", Duration::from_secs(30)).await;
    let term = first.election(&name).campaign().await.unwrap();
    let epoch = term.epoch();
    term.proclaim("a").await.unwrap();
    server.cmd(&["XTRIM", &history(&name), "MAXLEN", "0"]);
    server.cmd(&["DEL", &key(&name)]);

    let election = second.election(&name);
    let next_term = election.campaign().await.unwrap();
    assert_eq!(next_term.epoch(), epoch + 1);
    next_term.resign().await.unwrap();
    assert_eq!(
        entries(&server, &name),
        [
            format!("3-0 elected {}", epoch + 1),
            format!("4-0 vacant {} resigned", epoch + 1),
        ]
    );
    drop(term);
}

/// `watch_after` with seqs no history reaches (`u64::MAX`, and 2^60, past Lua's exact numbers)
/// gives a gap at once, then history's newest change and every change after it.
#[tokio::test]
async fn watch_after_a_seq_past_history_is_a_gap() {
    let (_server, client, name) = common::setup("history_huge", Duration::from_secs(30)).await;
    let election = client.election(&name);
    let term = election.campaign().await.unwrap();
    term.proclaim("a").await.unwrap();
    let mut watches = [u64::MAX, 1 << 60].map(|seq| (seq, election.watch_after(seq)));
    for (seq, watch) in &mut watches {
        let first = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("no gap within 5 s")
            .expect("the watch ended");
        let first = first.unwrap_or_else(|e| panic!("watch_after({seq}) failed: {e}"));
        assert_eq!(line(&first), format!("gap {seq} 2"));
        assert_eq!(lines(watch, 1).await, ["2 proclaimed 1 a"]);
    }
    term.resign().await.unwrap();
    for (_, watch) in &mut watches {
        assert_eq!(lines(watch, 1).await, ["3 vacant 1 Resigned"]);
    }
}
