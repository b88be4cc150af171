//! What the lock model's counterexample traces show (see [`super::super::trace::render`]).

use std::fmt::Write as _;

use super::super::trace::Traced;
use super::calls::Log;
use super::state::LockState;
use super::steps::Action;
use super::LockModel;
use crate::server::Server;

impl Traced for LockModel {
    fn server(state: &LockState) -> &Server {
        &state.server
    }

    fn faults(state: &LockState) -> u8 {
        state.faults
    }

    fn replay(&self, state: &LockState, action: Action, log: &mut Log) -> LockState {
        self.step(state, action, log)
    }

    fn describe(out: &mut String, s: &LockState) {
        for (i, c) in s.clients.iter().enumerate() {
            writeln!(out, "    client {i}: {c}").unwrap();
        }
        if let Some(free) = s.free_since {
            writeln!(out, "    lock free since t={free}").unwrap();
        }
    }
}

/// The trace of `path`, which violates `property`.
pub fn render(model: &LockModel, property: &str, path: &[(LockState, Option<Action>)]) -> String {
    super::super::trace::render(model, property, path)
}
