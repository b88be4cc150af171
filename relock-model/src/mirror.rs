//! The conformance mirror (written next).

/// Serves the mirror.
pub fn main(_args: &[String]) {}
