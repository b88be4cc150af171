//! `relock`: who holds a lock, who waits, and a live view, for relock's and Redisson's locks.
//!
//! Exit codes: 0 ok, 1 error (the server cannot be reached, a command failed), 2 usage (a bad
//! argument, or `unlock --force` or `functions remove-old` without `--yes` and no terminal to
//! confirm on), 3 not found or not locked (nothing relock knows under the name, no name matched,
//! nothing to unlock).

mod election;
mod functions;
mod json;
mod live;
mod text;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::PossibleValuesParser;
use clap::{Parser, Subcommand};
use relock::inspect::{Inspection, Kind};
use relock::{Client, Config};

/// Who holds a lock, who waits, and a live view: for relock's and Redisson's locks and
/// synchronizers on Redis.
#[derive(Parser)]
#[command(name = "relock", version, about, max_term_width = 100)]
struct Cli {
    /// The server: redis://host:port/db, rediss:// for TLS, redis-cluster://, redis-sentinel://.
    // Its value is never shown in `--help`: a URL may carry a password.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    url: String,
    /// Machine-readable output: one JSON document (NDJSON lines for `watch`).
    #[arg(long, global = true)]
    json: bool,
    /// A PEM file of CA certificates to trust for rediss:// (a private CA); without it the
    /// system's roots are trusted.
    #[arg(long, value_name = "PEM", global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// How long to wait for the server to answer, in seconds.
    #[arg(long, default_value_t = 5.0, global = true)]
    timeout: f64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The locks and synchronizers whose names match PATTERN (SCAN on every primary, never KEYS).
    Ls {
        /// A glob, as SCAN MATCH takes it.
        #[arg(default_value = "*")]
        pattern: String,
        /// Only this type.
        #[arg(long = "type", value_parser = PossibleValuesParser::new(Kind::LABELS))]
        kind: Option<String>,
        /// Stop after this many names.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Everything about one name: holders and the processes behind them, lease, waiters.
    Show {
        /// The lock's (or synchronizer's) name.
        name: String,
    },
    /// Free a lock whoever holds it, waking its waiters (relock's and Redisson's).
    Unlock {
        /// The lock's name.
        name: String,
        /// Required: this frees a lock its holder still thinks it has.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
    /// A live view of one name: holders with their lease draining, waiters, releases per second.
    /// For an election (`relock_election:E`): its changes, a line each, as they happen.
    Watch {
        /// The lock's (or synchronizer's, or election's) name.
        name: String,
        /// How often to refresh, in milliseconds.
        #[arg(long, default_value_t = 250)]
        interval: u64,
        /// For an election: the changes after this place of its history (`#N`), instead of
        /// from its newest one.
        #[arg(long, value_name = "N")]
        after: Option<u64>,
    },
    /// The busiest names (most waiters, longest held); pick one with Enter to watch it.
    Top {
        /// A glob, as SCAN MATCH takes it.
        #[arg(default_value = "*")]
        pattern: String,
        /// How often to refresh, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval: u64,
        /// Look at this many names at most.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// relock's Redis function libraries on the server (on each primary of a cluster).
    ///
    /// On Redis 7.0 and later and on Valkey, a relock client loads its scripts at connect as
    /// one function library, `relock_<16 hex digits>` (a hash of its text), and calls them by
    /// FCALL. Each relock build whose scripts differ has a library of its own, so those of
    /// earlier builds stay on a server after an upgrade: a little memory, nothing else. This
    /// lists them, one a line: the name, how many functions, and `current` for this build's
    /// library (which connecting loads), `other build` for the others. A server without
    /// functions (before Redis 7.0), or that does not allow them, is said so: relock sends its
    /// scripts by EVALSHA there.
    Functions {
        #[command(subcommand)]
        action: Option<FunctionsAction>,
    },
    /// The server: its address and version, its relock function libraries, and how relock sends
    /// its scripts there (as functions, or by EVALSHA and why).
    Info,
}

#[derive(Subcommand)]
enum FunctionsAction {
    /// Remove (FUNCTION DELETE) every relock library but this build's.
    ///
    /// Without --yes it lists what it would remove and asks on a terminal (without one it
    /// removes nothing). A library still used by running clients of another relock build is
    /// loaded again by them when they next call it (their FCALL meets "Function not found" and
    /// they reload the library), so removing it is safe, but costs each of them one reload.
    RemoveOld {
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

/// How a command ended, beyond success: the exit code and what to say.
enum Failure {
    Error(String),
    Usage(String),
    NotFound(String),
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::Error(_) => 1,
            Failure::Usage(_) => 2,
            Failure::NotFound(_) => 3,
        }
    }

    fn message(&self) -> &str {
        match self {
            Failure::Error(m) | Failure::Usage(m) | Failure::NotFound(m) => m,
        }
    }
}

type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&Failure::Error(format!("cannot start: {e}"))),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => fail(&failure),
    }
}

fn fail(failure: &Failure) -> ExitCode {
    eprintln!("relock: {}", failure.message());
    ExitCode::from(failure.code())
}

async fn run(cli: Cli) -> Outcome {
    if !(cli.timeout > 0.0 && cli.timeout <= 3600.0) {
        return Err(Failure::Usage(
            "--timeout must be above 0 and at most 3600 seconds".into(),
        ));
    }
    let timeout = Duration::from_secs_f64(cli.timeout);
    let client = connect(&cli.url, cli.tls_ca.as_deref(), timeout).await?;
    let outcome = match cli.command {
        Command::Ls {
            pattern,
            kind,
            limit,
        } => ls(&client, &pattern, kind, limit, cli.json).await,
        Command::Show { name } => show(&client, &name, cli.json).await,
        Command::Unlock { name, force, yes } => unlock(&client, &name, force, yes, cli.json).await,
        Command::Watch {
            name,
            interval,
            after,
        } => {
            let interval = interval_of(interval)?;
            match election::of(&name) {
                Some(e) => election::watch(&client, e, after, cli.json).await,
                None if after.is_some() => Err(Failure::Usage(
                    "--after is for an election's watch (relock_election:NAME)".into(),
                )),
                None => live::watch(&client, &cli.url, &name, interval, cli.json).await,
            }
        }
        Command::Top {
            pattern,
            interval,
            limit,
        } => {
            let interval = interval_of(interval)?;
            if limit == 0 {
                return Err(Failure::Usage("--limit must be above 0".into()));
            }
            live::top(&client, &cli.url, &pattern, limit, interval, cli.json).await
        }
        Command::Functions { action: None } => functions::list(&client, cli.json).await,
        Command::Functions {
            action: Some(FunctionsAction::RemoveOld { yes }),
        } => functions::remove_old(&client, yes, cli.json).await,
        Command::Info => functions::info(&client, cli.json).await,
    };
    // Read-only: nothing of ours to release; close the connections quietly.
    let _ = client.shutdown_keeping_locks().await;
    outcome
}

fn interval_of(ms: u64) -> Result<Duration, Failure> {
    if !(20..=60_000).contains(&ms) {
        return Err(Failure::Usage(
            "--interval must be 20 to 60000 milliseconds".into(),
        ));
    }
    Ok(Duration::from_millis(ms))
}

async fn connect(
    url: &str,
    tls_ca: Option<&std::path::Path>,
    timeout: Duration,
) -> Result<Client, Failure> {
    let mut config = Config::from_url(url)
        .map_err(|e| Failure::Usage(format!("bad --url {url}: {e}")))?
        .with_command_timeout(timeout);
    if let Some(path) = tls_ca {
        let pem = std::fs::read(path)
            .map_err(|e| Failure::Usage(format!("cannot read --tls-ca {}: {e}", path.display())))?;
        config = config
            .with_tls_root_certificates(pem)
            .map_err(|e| Failure::Usage(format!("bad --tls-ca {}: {e}", path.display())))?;
    }
    Client::new(config)
        .await
        .map_err(|e| Failure::Error(format!("cannot connect to {url}: {e}")))
}

/// An error of the library as a command's failure.
pub(crate) fn failed(e: relock::Error) -> Failure {
    Failure::Error(e.to_string())
}

async fn ls(
    client: &Client,
    pattern: &str,
    kind: Option<String>,
    limit: usize,
    json: bool,
) -> Outcome {
    if limit == 0 {
        return Err(Failure::Usage("--limit must be above 0".into()));
    }
    let found = client.find(pattern, limit).await.map_err(failed)?;
    let items: Vec<&Inspection> = found
        .items
        .iter()
        .filter(|i| kind.as_ref().map_or(true, |k| i.kind.label() == k))
        .collect();
    let mut out = std::io::stdout().lock();
    if json {
        let doc = serde_json::json!({
            "items": items.iter().map(|i| json::inspection(i)).collect::<Vec<_>>(),
            "more": found.more,
            "keys_seen": found.keys_seen,
        });
        let _ = writeln!(out, "{doc}");
    } else if !items.is_empty() {
        let _ = write!(out, "{}", text::table(&items));
        if found.more {
            let _ = writeln!(
                out,
                "(stopped at --limit {limit}: more names may match; narrow the pattern or raise the limit)"
            );
        }
    }
    if items.is_empty() {
        return Err(Failure::NotFound(format!(
            "no lock or synchronizer matches `{pattern}`"
        )));
    }
    Ok(())
}

async fn show(client: &Client, name: &str, json: bool) -> Outcome {
    let seen = client.inspect(name).await.map_err(failed)?;
    if !seen.kind.is_known() {
        if json {
            println!("{}", json::inspection(&seen));
        }
        return Err(not_known(&seen));
    }
    let leader = match seen.election() {
        Some(e) => election::leader(client, e).await?,
        None => None,
    };
    if json {
        let mut doc = json::inspection(&seen);
        if seen.kind == Kind::Election {
            doc["election"] = election::json_of(leader.as_ref());
        }
        println!("{doc}");
    } else {
        print!("{}", text::show(&seen));
        if let Some(leader) = &leader {
            print!("{}", election::rows(leader, std::time::SystemTime::now()));
        }
    }
    Ok(())
}

fn not_known(seen: &Inspection) -> Failure {
    match &seen.kind {
        Kind::Other(kind) => Failure::NotFound(format!(
            "`{}` is a {kind}, not a lock or synchronizer relock knows",
            seen.name
        )),
        _ => Failure::NotFound(format!("nothing relock knows is at `{}`", seen.name)),
    }
}

async fn unlock(client: &Client, name: &str, force: bool, yes: bool, json: bool) -> Outcome {
    if !force {
        return Err(Failure::Usage(
            "unlock needs --force: it frees the lock whoever holds it, and the holder goes on \
             as if it still held it"
                .into(),
        ));
    }
    let seen = client.inspect(name).await.map_err(failed)?;
    if !seen.kind.is_known() {
        return Err(not_known(&seen));
    }
    if !seen.kind.is_lock() {
        return Err(Failure::NotFound(format!(
            "`{name}` is a {}, not a lock: relock unlock frees locks only",
            seen.kind.label()
        )));
    }
    if seen.holders.is_empty() && seen.delay_ms.is_none() {
        return Err(Failure::NotFound(format!("`{name}` is not locked")));
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::Usage(
                "unlock --force asks for confirmation on a terminal; pass --yes to run it without one"
                    .into(),
            ));
        }
        eprint!("{}", text::show(&seen));
        eprint!("Free `{name}` now? Its holder will not know. [y/N] ");
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(Failure::Error("not confirmed: nothing was changed".into()));
        }
    }
    let freed = client.force_unlock(&seen).await.map_err(failed)?;
    let holders: Vec<&str> = seen
        .holders
        .iter()
        .map(|h| h.party.field.as_str())
        .collect();
    if json {
        println!(
            "{}",
            serde_json::json!({"name": name, "type": seen.kind.label(), "freed": freed, "holders": holders})
        );
    } else if freed {
        println!(
            "freed `{name}` ({}), held by {}",
            seen.kind.label(),
            if holders.is_empty() {
                "nobody (a lock-delay ended)".to_owned()
            } else {
                holders.join(", ")
            }
        );
    }
    if !freed {
        return Err(Failure::NotFound(format!(
            "`{name}` was not locked any more"
        )));
    }
    Ok(())
}
