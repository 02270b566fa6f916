//! Isolation backends behind one trait: the same `Plan` in, the same
//! `Outcome` out. Selected once per command.

pub mod native;

use crate::outcome::Outcome;
use crate::plan::Plan;
use crate::spec::RuntimeChoice;

/// Per-run I/O choices that are not part of the sandbox itself.
#[derive(Clone, Copy, Debug)]
pub struct RunIo {
    /// Capture stdout/stderr into the outcome, each bounded to this many bytes.
    pub capture: Option<u64>,
    /// Monotonic ns when husk started (for `duration_ms` and `phases_ms`).
    pub t_start: u64,
}

pub trait Backend {
    fn name(&self) -> &'static str;
    /// Runs the plan to completion. Never returns an error: every failure
    /// is an `Outcome` with `termination: setup_failed`.
    fn run(&self, plan: Plan, io: RunIo) -> Outcome;
    /// What the verdict's `isolation` says this backend applies for `plan`.
    fn isolation(&self, plan: &Plan) -> serde_json::Value;
}

/// Picks the backend for a run.
pub fn select(choice: RuntimeChoice) -> Result<Box<dyn Backend>, String> {
    match choice {
        RuntimeChoice::Native | RuntimeChoice::Auto => Ok(Box::new(native::Native)),
        RuntimeChoice::Runsc => Err("the runsc backend is not available in this build; use --runtime native".into()),
    }
}
