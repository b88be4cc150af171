//! `relock-model`: `check` runs the bounded model checks and prints one JSON line per model
//! last; `walk` walks the deep bounds at random for a while (per model), reporting the same
//! way; `mirror` serves the conformance mirror (see `relock_model::mirror`).
//!
//! ```text
//! relock-model check [--deep] [--model NAME]
//! relock-model walk [--seconds N] [--seed S] [--model NAME]
//! relock-model mirror --real <port> [--report <file>]
//! ```

use relock_model::model::{self, Bound, Report, Walk};

/// A model's check within a bound.
type Check = fn(Bound) -> Report;

/// A model's random walks.
type Walker = fn(Walk) -> Report;

/// Every model `check` and `walk` run, by name.
const MODELS: &[(&str, Check, Walker)] = &[
    ("lock", model::lock::check, model::lock::walk),
    ("fair", model::fair::check, model::fair::walk),
    ("semaphore", model::semaphore::check, model::semaphore::walk),
    ("rw", model::rw::check, model::rw::walk),
    ("election", model::election::check, model::election::walk),
    ("tasks", model::tasks::check, model::tasks::walk),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("check") => check(&args[1..]),
        Some("walk") => walk(&args[1..]),
        Some("mirror") => relock_model::mirror::main(&args[1..]),
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: relock-model check [--deep] [--model NAME] \
         | walk [--seconds N] [--seed S] [--model NAME] \
         | mirror --real <port> [--report <file>]"
    );
    std::process::exit(2);
}

/// Runs the checks; exits 1 when any model has a violation.
fn check(args: &[String]) {
    let mut bound = Bound::Ci;
    let mut only = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--deep" => bound = Bound::Deep,
            "--model" => only = Some(it.next().cloned().unwrap_or_else(|| usage())),
            _ => usage(),
        }
    }
    let reports = each_model(only.as_deref(), |name, check, _| {
        eprintln!("relock-model: checking {name} ({bound:?} bound)");
        check(bound)
    });
    finish(&reports);
}

/// Walks each model at random for `--seconds` (60 by default) from `--seed` (the clock's
/// nanoseconds by default); exits 1 when any walk met a violation.
fn walk(args: &[String]) {
    let mut walk = Walk {
        seconds: 60,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos())),
    };
    let mut only = None;
    let mut it = args.iter();
    let number = |it: &mut std::slice::Iter<String>| -> u64 {
        let value = it.next().and_then(|v| v.parse().ok());
        value.unwrap_or_else(|| usage())
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seconds" => walk.seconds = number(&mut it),
            "--seed" => walk.seed = number(&mut it),
            "--model" => only = Some(it.next().cloned().unwrap_or_else(|| usage())),
            _ => usage(),
        }
    }
    let reports = each_model(only.as_deref(), |name, _, walker| {
        eprintln!(
            "relock-model: walking {name} (deep bound, {} s, seed {})",
            walk.seconds, walk.seed
        );
        walker(walk)
    });
    finish(&reports);
}

/// Runs `run` on every model, or on the one named `only` (exits 2 on an unknown name).
fn each_model(only: Option<&str>, run: impl Fn(&str, Check, Walker) -> Report) -> Vec<Report> {
    if let Some(name) = only {
        if !MODELS.iter().any(|(n, ..)| *n == name) {
            let names: Vec<&str> = MODELS.iter().map(|(n, ..)| *n).collect();
            eprintln!(
                "relock-model: no model {name}; there are: {}",
                names.join(", ")
            );
            std::process::exit(2);
        }
    }
    MODELS
        .iter()
        .filter(|(name, ..)| only.is_none_or(|o| o == *name))
        .map(|(name, check, walker)| run(name, *check, *walker))
        .collect()
}

/// Prints one JSON line per report; exits 1 when any has a violation.
fn finish(reports: &[Report]) {
    for report in reports {
        println!("{}", report.json());
    }
    if reports.iter().any(|r| r.violations > 0) {
        std::process::exit(1);
    }
}
