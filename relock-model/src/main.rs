//! `relock-model`: `check` runs the bounded model checks and prints one JSON line per model
//! last; `mirror` serves the conformance mirror (see `relock_model::mirror`).
//!
//! ```text
//! relock-model check [--deep] [--model NAME]
//! relock-model mirror --real <port> [--report <file>]
//! ```

use relock_model::model::{self, Bound, Report};

/// A model's check within a bound.
type Check = fn(Bound) -> Report;

/// Every model `check` runs, by name.
const MODELS: &[(&str, Check)] = &[
    ("lock", model::lock::check),
    ("fair", model::fair::check),
    ("semaphore", model::semaphore::check),
    ("rw", model::rw::check),
    ("election", model::election::check),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("check") => check(&args[1..]),
        Some("mirror") => relock_model::mirror::main(&args[1..]),
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!("usage: relock-model check [--deep] [--model NAME] | mirror --real <port> [--report <file>]");
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
    if let Some(name) = &only {
        if !MODELS.iter().any(|(n, _)| n == name) {
            let names: Vec<&str> = MODELS.iter().map(|(n, _)| *n).collect();
            eprintln!(
                "relock-model: no model {name}; there are: {}",
                names.join(", ")
            );
            std::process::exit(2);
        }
    }
    let reports: Vec<Report> = MODELS
        .iter()
        .filter(|(name, _)| only.as_deref().is_none_or(|o| o == *name))
        .map(|(name, run)| {
            eprintln!("relock-model: checking {name} ({bound:?} bound)");
            run(bound)
        })
        .collect();
    for report in &reports {
        println!("{}", report.json());
    }
    if reports.iter().any(|r| r.violations > 0) {
        std::process::exit(1);
    }
}
