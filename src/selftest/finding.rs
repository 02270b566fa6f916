//! The words every judge speaks: a probe run as husk reported it, what the
//! host looked like before and after it, and the verdict with its detail.
//! Below the judges (judge.rs, egress.rs), which import it and nothing of
//! each other's.

use serde::Serialize;
use serde_json::Value;

/// The outcome of one probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// The attempt failed for a reason that means isolation held.
    #[serde(rename = "contained")]
    Contained,
    /// The attempt got through (or showed the protection missing).
    #[serde(rename = "ESCAPED")]
    Escaped,
    /// The probe could not be run on this host (the detail says why).
    #[serde(rename = "not_applicable")]
    NotApplicable,
    /// The probe ran but its result proves nothing (the sandbox failed to
    /// start, an unexpected errno): not a verdict on containment.
    #[serde(rename = "error")]
    Error,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Contained => "contained",
            Verdict::Escaped => "ESCAPED",
            Verdict::NotApplicable => "not_applicable",
            Verdict::Error => "error",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub verdict: Verdict,
    pub detail: String,
}

pub fn contained(detail: impl Into<String>) -> Finding {
    Finding { verdict: Verdict::Contained, detail: detail.into() }
}
pub fn escaped(detail: impl Into<String>) -> Finding {
    Finding { verdict: Verdict::Escaped, detail: detail.into() }
}
pub fn error(detail: impl Into<String>) -> Finding {
    Finding { verdict: Verdict::Error, detail: detail.into() }
}
pub fn not_applicable(detail: impl Into<String>) -> Finding {
    Finding { verdict: Verdict::NotApplicable, detail: detail.into() }
}

/// One `husk run` of the probe, as husk reported it.
#[derive(Clone, Debug, Default)]
pub struct ProbeRun {
    /// The verdict's `termination` (`exited`, `wall_timeout`, ...).
    pub termination: String,
    /// husk's exit code.
    pub exit_code: i32,
    /// The verdict's error message (and hint), when setup failed.
    pub error: Option<String>,
    /// The probe's JSON report (its first JSON line on stdout).
    pub report: Option<Value>,
    /// The whole husk verdict.
    pub verdict: Value,
}

/// Whose kernel the probe talks to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SandboxKernel {
    /// The host's (native backend): what the probe sees is the host kernel's
    /// view of the sandbox.
    #[default]
    Host,
    /// gVisor's sentry (runsc backend): /proc, uid_map, /dev and the syscall
    /// ABI the probe sees are the sandbox kernel's own.
    Gvisor,
}

/// Host facts the judges compare against, fixed before the run.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub kernel: SandboxKernel,
    /// The host uid of sandbox root, as husk's verdict reports it.
    pub sandbox_root_host_uid: Option<u64>,
    /// The secret content of the host marker file.
    pub marker_token: String,
    pub host_hostname: String,
    /// Id of the host SysV message queue.
    pub sysv_id: Option<i32>,
    /// argv marker of the host victim process.
    pub victim_marker: Option<String>,
    pub memory_limit: Option<u64>,
    pub pids_limit: Option<u64>,
}

/// What the host looked like after the run.
#[derive(Clone, Debug, Default)]
pub struct After {
    /// Is the victim process still alive (None: no victim)?
    pub victim_alive: Option<bool>,
    /// Host pids whose argv holds the run's `{token}`.
    pub leftover_pids: Vec<i32>,
    /// `{scratch}` paths the probe created that appeared on the host.
    pub created_on_host: Vec<String>,
    /// Bytes waiting in the host terminal's input queue (None: no tty).
    pub tty_queued: Option<usize>,
    /// The host's hostname after the run.
    pub host_hostname: Option<String>,
    /// Connections and datagrams the egress marker got during the run.
    pub egress_hits: Option<u64>,
}
