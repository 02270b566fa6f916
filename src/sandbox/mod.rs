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
//! - `lifecycle`: the API's create, list, inspect, remove, renew (typed
//!   requests of `crate::request` in, typed results out); create for a
//!   spec, readiness check, summary, destroy, wait
//! - `prepare`: the one Spec -> Plan pipeline (backend, root, plan) of run and create
//! - `exec`: `husk exec` (planned here, run by the sandbox's backend)
//! - `held`: the plan and seccomp filter of a process started in a sandbox
//! - `gc`: what dead supervisors left behind
//! - `pool`: claiming a pool's member (`husk serve --pool`)
//! - `events`: OOM kills, pids-limit hits, renewals, execs (a bounded journal)
//! - `tombstone`: how and when recently ended sandboxes ended
//!
//! Nothing here asks which backend a sandbox has: `backend::Backend::create`
//! starts it, `backend::Live` holds it, `backend::exec` runs each exec.
//!
//! See docs/sandboxes.md.

pub mod copy;
pub mod events;
pub mod exec;
pub mod files;
pub mod gc;
pub mod held;
pub mod lifecycle;
pub mod memfork;
pub mod pause;
pub mod pool;
pub mod prepare;
pub mod proto;
pub mod registry;
pub mod snapshot_images;
pub mod state;
pub mod supervisor;
pub mod tombstone;

pub use crate::request::{CreateOptions, ExecOptions, ProcessOptions, SandboxOptions};
pub use exec::{ExecResult, exec_with};
pub use lifecycle::{CreateError, Created, Removed, Renewed, Targets, create, inspect, list, remove, renew};

use crate::outcome::ErrorReport;
use crate::step::Phase;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{0}")]
    Usage(String),
    #[error("no sandbox {what:?} in {}; `husk ls` lists the sandboxes there", state.display())]
    Unknown { what: String, state: PathBuf },
    /// It existed and ended (expired, removed, failed): its tombstone says
    /// how and when.
    #[error("sandbox {id}{what}")]
    Ended { id: String, what: String },
    #[error("the name {name:?} is taken by sandbox {id}; pick another name or remove it first (`husk rm {name}`)")]
    NameTaken { name: String, id: String },
    #[error(
        "sandbox {id} is busy: an exec is running and it runs one at a time; pass --wait to queue behind it, or create the sandbox with --concurrent"
    )]
    Busy { id: String },
    /// `husk pause`d: refused at once (it would wait for as long as the
    /// pause, which has no deadline); step `busy`, as it can take the exec
    /// later (serve's 409).
    #[error("sandbox {id} is paused; `husk resume {id}` lets it run commands again")]
    Paused { id: String },
    #[error("sandbox {id} is {state}{}", why.as_deref().map(|w| format!(": {w}")).unwrap_or_default())]
    Gone { id: String, state: &'static str, why: Option<String> },
    /// A composed message about the state on disk that no syscall failed
    /// for (a directory locked by another, a record that is not one).
    #[error("sandbox state: {0}")]
    State(String),
    /// A file of the state on disk could not be made, read or written:
    /// its errno reaches the verdict.
    #[error("sandbox state: {what} {}: {source}", path.display())]
    StateIo {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A state.json husk cannot read back, or a record it cannot encode.
    #[error("sandbox state: {what} {}: {source}", path.display())]
    StateJson {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The state directory itself (`--state-dir`).
    #[error("sandbox state: {0}")]
    Paths(#[from] crate::paths::PathsError),
    /// The supervisor's answer (a refusal it composed, carried as text by
    /// the wire's `Reply.error`) or a composed message about it.
    #[error("sandbox supervisor: {0}")]
    Supervisor(String),
    /// The supervisor's socket failed: its errno reaches the verdict.
    #[error("sandbox supervisor: {what} {}: {errno}", path.display())]
    Socket { what: &'static str, path: PathBuf, errno: nix::errno::Errno },
    /// A failure the verdict names by step, with the kernel's errno.
    #[error("{}", .0.message)]
    Setup(ErrorReport),
}

impl SandboxError {
    /// The step a verdict names for this failure.
    pub fn step(&self) -> Phase {
        match self {
            SandboxError::Usage(_) => Phase::Arguments,
            SandboxError::Unknown { .. }
            | SandboxError::Ended { .. }
            | SandboxError::Gone { .. }
            | SandboxError::NameTaken { .. } => Phase::Sandbox,
            SandboxError::Busy { .. } | SandboxError::Paused { .. } => Phase::Busy,
            SandboxError::State(_)
            | SandboxError::StateIo { .. }
            | SandboxError::StateJson { .. }
            | SandboxError::Paths(_) => Phase::State,
            SandboxError::Supervisor(_) | SandboxError::Socket { .. } => Phase::Supervisor,
            SandboxError::Setup(e) => e.step,
        }
    }

    pub fn hint(&self) -> Option<&str> {
        match self {
            SandboxError::Setup(e) => e.hint.as_deref(),
            _ => None,
        }
    }

    /// The kernel's errno behind it, when a syscall failed.
    pub fn errno(&self) -> Option<nix::errno::Errno> {
        match self {
            SandboxError::StateIo { source, .. } => crate::step::io_errno(source),
            SandboxError::Paths(crate::paths::PathsError::Io { source, .. }) => crate::step::io_errno(source),
            SandboxError::Socket { errno, .. } => Some(*errno),
            SandboxError::Setup(e) => e.errno,
            _ => None,
        }
    }

    /// The failure as the verdict's `error` reports it.
    pub fn report(&self) -> ErrorReport {
        match self {
            SandboxError::Setup(e) => e.clone(),
            e => ErrorReport::new(e.step(), e.to_string()).with_errno(e.errno()),
        }
    }
}

/// A backend's failure to start or reach a sandbox, as `husk create` and
/// `husk exec` report it.
impl From<ErrorReport> for SandboxError {
    fn from(e: ErrorReport) -> SandboxError {
        SandboxError::Setup(e)
    }
}
