//! The permit semaphore's model (being written).

use super::{Bound, Report};

/// Checks the semaphore's model within `bound`.
pub fn check(_bound: Bound) -> Report {
    unimplemented!()
}
