//! The live views (`top`, `watch`) driven in a real terminal (tmux).

use super::*;

/// A tmux server of this test's own, with one 80×24 window.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(command: &str) -> Tmux {
        let socket = format!("relock-cli-test-{}", std::process::id());
        let tmux = Tmux { socket };
        let ok = tmux
            .run(&["new-session", "-d", "-x", "80", "-y", "24", command])
            .status
            .success();
        assert!(
            ok,
            "tmux new-session (is tmux installed? apt-get install tmux)"
        );
        tmux
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("run tmux (is it installed? apt-get install tmux)")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p"]).stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        assert!(self.run(&["send-keys", keys]).status.success());
    }

    /// Waits until the screen shows every one of `texts`; returns it.
    async fn shows(&self, texts: &[&str]) -> String {
        let mut screen = String::new();
        let ok = common::eventually(Duration::from_secs(15), || {
            screen = self.screen();
            let ok = texts.iter().all(|t| screen.contains(t));
            async move { ok }
        })
        .await;
        assert!(ok, "the screen never showed {texts:?}:\n{screen}");
        screen
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

#[tokio::test]
async fn top_and_watch_draw_in_a_real_terminal_and_quit_cleanly() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (
        common::client(&server, WATCHDOG).await,
        common::client(&server, WATCHDOG).await,
    );
    let base = common::prefix("cli-top");
    let name = format!("{base}:busy");
    let _held = common::hold(&a, &name).await;
    let _waiter = common::spawn_waiter(b.lock(&name));
    assert!(common::until_subscribed(&server, &name, 1).await);
    let quiet = format!("{base}:quiet");
    let _quiet = common::hold(&a, &quiet).await;

    // top, then watch (quit with Ctrl-C), then unlock --force, which asks on a terminal. Each
    // exit code goes to a file: the next view may cover the screen before a poll sees it.
    let bin = env!("CARGO_BIN_EXE_relock");
    let codes = std::env::temp_dir().join(format!("relock-cli-codes-{}", std::process::id()));
    let _ = std::fs::remove_file(&codes);
    let file = codes.display();
    let command = format!(
        "export REDIS_URL={url}; {bin} top '{base}:*' --interval 200; echo top=$? >> {file}; \
         {bin} watch {quiet}; echo watch=$? >> {file}; \
         {bin} unlock {quiet} --force; echo unlock=$? >> {file}; sleep 60"
    );
    let tmux = Tmux::start(&command);
    let pid = std::process::id().to_string();
    let screen = tmux.shows(&["relock top", &name, &quiet, &pid]).await;
    // The busy name (a waiter) ranks first.
    let busy_at = screen.find(&name).unwrap();
    assert!(busy_at < screen.find(&quiet).unwrap(), "{screen}");
    assert!(screen.lines().count() <= 24 && screen.lines().all(|l| l.chars().count() <= 80));

    tmux.keys("Enter");
    let screen = tmux
        .shows(&[
            "relock watch",
            &name,
            "Holders (1)",
            &format!("pid {pid}"),
            "1 connection subscribed",
        ])
        .await;
    assert!(screen.contains("Lease"), "{screen}");
    tmux.keys("Escape");
    tmux.shows(&["relock top"]).await;
    tmux.keys("q");
    assert_eq!(ended(&codes, "top", &tmux).await, "0");

    tmux.shows(&["relock watch", &quiet, "Holders (1)"]).await;
    tmux.keys("C-c");
    assert_eq!(ended(&codes, "watch", &tmux).await, "0");
    // Back on the normal screen: the unlock's question, not a view's leftovers.
    let screen = tmux.shows(&["Free `"]).await;
    assert!(
        !screen.contains("relock watch") && !screen.contains("relock top"),
        "the terminal was given back:\n{screen}"
    );
    assert!(
        common::raw_exists(&server, &quiet),
        "not freed before the answer"
    );
    tmux.keys("y");
    tmux.keys("Enter");
    assert_eq!(ended(&codes, "unlock", &tmux).await, "0");
    tmux.shows(&["freed `"]).await;
    assert!(!common::raw_exists(&server, &quiet), "freed once confirmed");
    let _ = std::fs::remove_file(&codes);
}

/// The exit code `program` wrote to `codes` once it ended, waiting at most 15 s for it; on a
/// timeout the failure shows the terminal as it was.
async fn ended(codes: &std::path::Path, program: &str, tmux: &Tmux) -> String {
    let read = || {
        let all = std::fs::read_to_string(codes).ok()?;
        let prefix = format!("{program}=");
        all.lines()
            .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
    };
    let seen = common::eventually(Duration::from_secs(15), || {
        let seen = read().is_some();
        async move { seen }
    })
    .await;
    assert!(
        seen,
        "{program} never ended; the terminal shows:\n{}",
        tmux.screen()
    );
    read().unwrap()
}
