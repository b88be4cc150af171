//! What the tasks model's counterexample traces show (see [`super::super::trace::render`]).

use std::fmt::Write as _;

use super::super::lock::calls::Log;
use super::super::trace::Traced;
use super::state::TasksState;
use super::steps::Action;
use super::TasksModel;
use crate::server::Server;

impl Traced for TasksModel {
    fn server(state: &TasksState) -> &Server {
        &state.server
    }

    fn faults(state: &TasksState) -> u8 {
        state.faults
    }

    fn replay(&self, state: &TasksState, action: Action, log: &mut Log) -> TasksState {
        self.step(state, action, log)
    }

    fn describe(out: &mut String, s: &TasksState) {
        for (p, process) in s.processes.iter().enumerate() {
            writeln!(out, "    process {p}: {process}").unwrap();
        }
        for (t, task) in s.tasks.iter().enumerate() {
            writeln!(out, "    task {t}: {task}").unwrap();
        }
        if let Some(free) = s.free_since {
            writeln!(out, "    lock free since t={free}").unwrap();
        }
    }
}

/// The trace of `path`, which violates `property`.
pub fn render(model: &TasksModel, property: &str, path: &[(TasksState, Option<Action>)]) -> String {
    super::super::trace::render(model, property, path)
}
