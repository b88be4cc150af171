//! Runs the lock model's bounded check (`Ci`, or `Deep` with `deep`) and prints its report.
//! `LOCK_FAULTS`, `LOCK_HORIZON` and `LOCK_CLIENTS` (2 or 3) override the bound's.

use relock_model::model::lock::{LockModel, Op};
use relock_model::model::Bound;

fn main() {
    let bound = match std::env::args().nth(1).as_deref() {
        Some("deep") => Bound::Deep,
        _ => Bound::Ci,
    };
    let mut model = LockModel::new(bound);
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(faults) = var("LOCK_FAULTS") {
        model.max_faults = faults as u8;
    }
    if let Some(horizon) = var("LOCK_HORIZON") {
        model.horizon = horizon;
    }
    if let Some(clients) = var("LOCK_CLIENTS") {
        model.plans.truncate(2);
        if clients > 2 {
            model.plans.push(vec![Op::Lock, Op::Unlock]);
        }
        model.cancellable = vec![true; model.plans.len()];
    }
    let outcome = model.run(2);
    for property in &outcome.unmet {
        eprintln!("never met: {property}");
    }
    println!("{}", outcome.report.json());
}
