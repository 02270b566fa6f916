//! Sandboxes that live: `husk create` starts one (its init waiting, nothing
//! of the user's running), `husk exec` runs commands in it, `husk rm`, the
//! lease (`--ttl`, renewed by every exec and `husk renew`) or `husk gc`
//! ends it. No daemon: each sandbox has a small supervisor process of its
//! own (see `supervisor`), which holds the lease, serves its socket and
//! removes everything when the sandbox ends.
//!
//! - `state`: the record and files under `<state dir>/sandboxes/`
//! - `proto`: the supervisor's socket protocol
//! - `registry`: lookup and liveness (asks the record, then the supervisor)
//! - `supervisor`: creation and the supervisor's life
//! - `exec`: `husk exec` (planned here, run by the sandbox's backend)
//! - `gc`: what dead supervisors left behind
//!
//! Nothing here asks which backend a sandbox has: `backend::Backend::create`
//! starts it, `backend::Live` holds it, `backend::exec` runs each exec.
//!
//! See docs/sandboxes.md.

pub mod exec;
pub mod gc;
pub mod proto;
pub mod registry;
pub mod state;
pub mod supervisor;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{0}")]
    Usage(String),
    #[error("no sandbox {what:?} in {}; `husk ls` lists the sandboxes there", state.display())]
    Unknown { what: String, state: PathBuf },
    #[error("the name {name:?} is taken by sandbox {id}; pick another name or remove it first (`husk rm {name}`)")]
    NameTaken { name: String, id: String },
    #[error(
        "sandbox {id} is busy: an exec is running and it runs one at a time; pass --wait to queue behind it, or create the sandbox with --concurrent"
    )]
    Busy { id: String },
    #[error("sandbox {id} is {state}{}", why.as_deref().map(|w| format!(": {w}")).unwrap_or_default())]
    Gone { id: String, state: &'static str, why: Option<String> },
    #[error("sandbox state: {0}")]
    State(String),
    #[error("sandbox supervisor: {0}")]
    Supervisor(String),
    #[error("{message}")]
    Setup { step: String, message: String, hint: Option<String> },
}

impl SandboxError {
    /// The step a verdict names for this failure.
    pub fn step(&self) -> &str {
        match self {
            SandboxError::Usage(_) => "arguments",
            SandboxError::Unknown { .. } | SandboxError::Gone { .. } | SandboxError::NameTaken { .. } => "sandbox",
            SandboxError::Busy { .. } => "busy",
            SandboxError::State(_) => "state",
            SandboxError::Supervisor(_) => "supervisor",
            SandboxError::Setup { step, .. } => step,
        }
    }

    pub fn hint(&self) -> Option<&str> {
        match self {
            SandboxError::Setup { hint, .. } => hint.as_deref(),
            _ => None,
        }
    }
}

/// A backend's failure to start or reach a sandbox, as `husk create` and
/// `husk exec` report it.
impl From<crate::outcome::ErrorReport> for SandboxError {
    fn from(e: crate::outcome::ErrorReport) -> SandboxError {
        SandboxError::Setup { step: e.step, message: e.message, hint: e.hint }
    }
}
