//! The plain lock's model (being written).

use super::{Bound, Report};

/// Checks the lock's model within `bound`.
pub fn check(_bound: Bound) -> Report {
    unimplemented!()
}
