//! How a run ended (`Outcome`), the exit code that follows from it, and the
//! JSON verdict (schema: docs/verdict.schema.json).

use crate::capture::Captured;
use crate::cgroup::report::{AppliedLimits, CgroupReport, Usage};
use crate::isolation::Isolation;
use crate::redact::Redaction;
use crate::seccomp::report::SeccompReport;
use crate::step::{Phase, Step};
use nix::errno::Errno;
use serde::Serialize;
use std::collections::BTreeMap;

pub const EXIT_TIMEOUT: i32 = 124;
pub const EXIT_HUSK_FAILED: i32 = 125;
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
pub const EXIT_NOT_FOUND: i32 = 127;
pub const VERDICT_VERSION: u32 = 1;

/// The closed set of reasons a run ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    /// The command exited on its own; `exit_code` is its status.
    Exited,
    /// The command was killed by a signal (not by husk's timeout).
    Signaled,
    /// husk killed the sandbox at `--timeout`.
    WallTimeout,
    /// The kernel's OOM killer killed a process at the memory limit.
    OomKilled,
    /// husk could not build the sandbox or start the command.
    SetupFailed,
}

/// Where and why setup failed. Typed until serialized: the step is a
/// `Phase` (its name in JSON), the errno an `Errno` (its symbolic name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ErrorReport {
    /// Named step (e.g. `pivot_root`, `exec`, `plan`).
    pub step: Phase,
    /// The kernel's errno when a syscall failed (`"EINVAL"` in JSON).
    #[serde(serialize_with = "crate::step::serialize_errno")]
    pub errno: Option<Errno>,
    /// A verdict carries it through `redacted`: no secret value of the
    /// request reaches it, and with `--redact` no host path, host or user
    /// name.
    pub message: String,
    /// How to fix the host or the invocation, when known.
    pub hint: Option<String>,
}

impl ErrorReport {
    pub fn new(step: impl Into<Phase>, message: impl Into<String>) -> Self {
        ErrorReport { step: step.into(), errno: None, message: message.into(), hint: None }
    }

    pub fn with_errno(mut self, errno: impl Into<Option<Errno>>) -> Self {
        self.errno = errno.into();
        self
    }

    pub fn with_hint(mut self, hint: impl Into<Option<String>>) -> Self {
        self.hint = hint.into();
        self
    }

    /// This report as `redact` lets it be seen (message and hint).
    pub fn redacted(&self, redact: &Redaction) -> ErrorReport {
        ErrorReport {
            step: self.step,
            errno: self.errno,
            message: redact.text(&self.message),
            hint: self.hint.as_deref().map(|h| redact.text(h)),
        }
    }
}

/// Result of one run, independent of the backend.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub termination: Termination,
    /// The command's own exit status, when it exited.
    pub status: Option<i32>,
    pub signal: Option<i32>,
    pub error: Option<ErrorReport>,
    /// Phase name -> milliseconds.
    pub phases_ms: BTreeMap<&'static str, f64>,
    pub duration_ms: f64,
    pub stdout: Option<Captured>,
    pub stderr: Option<Captured>,
    /// Facility reports filled by the backend, each typed by the facility
    /// that owns it: the cgroup's limits and usage (`add_cgroup`), the
    /// seccomp filter and what it denied.
    pub limits: Option<AppliedLimits>,
    pub resources: Option<Usage>,
    pub seccomp: Option<SeccompReport>,
    /// The egress allowlist's accounting (`--network allow=`).
    pub network: Option<crate::net::account::NetworkReport>,
    /// `--publish`: the host addresses bound (the port a HOSTPORT of 0 got).
    pub published: Vec<crate::net::publish::Published>,
}

impl Outcome {
    pub fn setup_failed(error: ErrorReport) -> Self {
        Outcome { error: Some(error), ..Outcome::blank() }
    }

    /// An outcome still being filled in by a backend: no error, no report,
    /// termination `setup_failed` until the backend says how the run ended.
    pub fn blank() -> Self {
        Outcome {
            termination: Termination::SetupFailed,
            status: None,
            signal: None,
            error: None,
            phases_ms: BTreeMap::new(),
            duration_ms: 0.0,
            stdout: None,
            stderr: None,
            limits: None,
            resources: None,
            seccomp: None,
            network: None,
            published: Vec::new(),
        }
    }

    /// Fills the verdict's `limits` and `resources` from the run's cgroup,
    /// and names an OOM kill as the termination when the command died of
    /// SIGKILL (or a shell reported 137 for it) and the cgroup's OOM
    /// counter moved. A fresh cgroup starts at zero, so any count is this
    /// run's; husk's timeout kill takes precedence.
    pub fn add_cgroup(&mut self, report: CgroupReport) {
        let (limits, usage) = report.into_verdict();
        if usage.oom_kills.unwrap_or(0) > 0 {
            let killed = match self.termination {
                Termination::Signaled => self.signal == Some(libc::SIGKILL),
                Termination::Exited => self.status == Some(128 + libc::SIGKILL),
                _ => false,
            };
            if killed {
                self.termination = Termination::OomKilled;
                self.signal = Some(libc::SIGKILL);
            }
        }
        self.limits = Some(limits);
        self.resources = Some(usage);
    }

    /// The verdict of a run without cgroup (`--no-cgroup`).
    pub fn no_cgroup(&mut self) {
        self.limits = Some(AppliedLimits::NoCgroup);
    }

    /// Records how the command ended (exited with a code, or by a signal).
    pub fn set_command_status(&mut self, status: crate::sys::process::ExitStatus) {
        use crate::sys::process::ExitStatus;
        match status {
            ExitStatus::Exited(code) => {
                self.termination = Termination::Exited;
                self.status = Some(code);
            }
            ExitStatus::Signaled(sig) => {
                self.termination = Termination::Signaled;
                self.signal = Some(sig);
            }
        }
    }

    /// The exit code husk itself returns (the contract in the README).
    pub fn exit_code(&self) -> i32 {
        match self.termination {
            Termination::Exited => self.status.unwrap_or(0),
            Termination::Signaled => 128 + self.signal.unwrap_or(0),
            Termination::WallTimeout => EXIT_TIMEOUT,
            Termination::OomKilled => 128 + libc::SIGKILL,
            Termination::SetupFailed => match self.error.as_ref().map(|e| (e.step, e.errno)) {
                Some((Phase::Step(Step::Exec), Some(Errno::ENOENT))) => EXIT_NOT_FOUND,
                // Too much argv + environment in all: the command is fine,
                // what husk was asked to hand it is not.
                Some((Phase::Step(Step::Exec), Some(Errno::E2BIG))) => EXIT_HUSK_FAILED,
                Some((Phase::Step(Step::Exec), _)) => EXIT_NOT_EXECUTABLE,
                _ => EXIT_HUSK_FAILED,
            },
        }
    }
}

pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig).map(|s| s.as_str().to_string()).unwrap_or_else(|_| format!("SIG{sig}"))
}

/// One captured stream in the verdict.
#[derive(Serialize, Debug)]
pub struct StreamReport<'a> {
    pub text: &'a str,
    pub base64: Option<&'a str>,
    pub bytes: u64,
    pub truncated: bool,
}

/// The verdict document. Every key is always present (null when it does
/// not apply), so consumers can rely on the shape.
#[derive(Serialize, Debug)]
pub struct Verdict<'a> {
    pub verdict_version: u32,
    pub husk_version: &'static str,
    pub id: &'a str,
    pub backend: &'a str,
    pub termination: Termination,
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
    pub duration_ms: f64,
    pub phases_ms: &'a BTreeMap<&'static str, f64>,
    /// null when husk failed before it had a plan.
    pub isolation: Option<&'a Isolation>,
    pub limits: Option<&'a AppliedLimits>,
    pub resources: Option<&'a Usage>,
    pub seccomp: Option<&'a SeccompReport>,
    /// What went through the egress proxy; null without --network allow=.
    pub network: Option<&'a crate::net::account::NetworkReport>,
    /// `--publish`: host address -> port inside; absent without it.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub published: &'a [crate::net::publish::Published],
    /// Redacted by `Verdict::new`'s `Redaction`.
    pub error: Option<ErrorReport>,
    pub stdout: Option<StreamReport<'a>>,
    pub stderr: Option<StreamReport<'a>>,
    /// Extra keys of long-lived sandboxes (sandbox id, lease), flattened.
    #[serde(flatten)]
    pub extra: BTreeMap<&'static str, serde_json::Value>,
}

impl<'a> Verdict<'a> {
    pub fn new(
        id: &'a str,
        backend: &'a str,
        outcome: &'a Outcome,
        isolation: Option<&'a Isolation>,
        with_output: bool,
        redact: &Redaction,
    ) -> Self {
        let stream = |c: &'a Option<Captured>| {
            c.as_ref().filter(|_| with_output).map(|c| StreamReport {
                text: &c.text,
                base64: c.base64.as_deref(),
                bytes: c.bytes,
                truncated: c.truncated,
            })
        };
        Verdict {
            verdict_version: VERDICT_VERSION,
            husk_version: env!("CARGO_PKG_VERSION"),
            id,
            backend,
            termination: outcome.termination,
            exit_code: outcome.exit_code(),
            signal: outcome.signal,
            signal_name: outcome.signal.map(signal_name),
            duration_ms: round3(outcome.duration_ms),
            phases_ms: &outcome.phases_ms,
            isolation,
            limits: outcome.limits.as_ref(),
            resources: outcome.resources.as_ref(),
            seccomp: outcome.seccomp.as_ref(),
            network: outcome.network.as_ref(),
            published: &outcome.published,
            error: outcome.error.as_ref().map(|e| e.redacted(redact)),
            stdout: stream(&outcome.stdout),
            stderr: stream(&outcome.stderr),
            extra: BTreeMap::new(),
        }
    }
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(termination: Termination, status: Option<i32>, signal: Option<i32>) -> Outcome {
        Outcome { termination, status, signal, ..Outcome::setup_failed(err(Phase::Plan, None)) }
    }

    fn err(step: impl Into<Phase>, errno: Option<Errno>) -> ErrorReport {
        ErrorReport::new(step, "").with_errno(errno)
    }

    #[test]
    fn exit_codes_follow_the_documented_contract() {
        assert_eq!(ended(Termination::Exited, Some(3), None).exit_code(), 3);
        assert_eq!(ended(Termination::Signaled, None, Some(9)).exit_code(), 137);
        assert_eq!(ended(Termination::WallTimeout, None, Some(9)).exit_code(), 124);
        assert_eq!(ended(Termination::OomKilled, None, Some(9)).exit_code(), 137);
        assert_eq!(Outcome::setup_failed(err(Step::PivotRoot, Some(Errno::EINVAL))).exit_code(), 125);
        assert_eq!(Outcome::setup_failed(err(Step::Exec, Some(Errno::ENOENT))).exit_code(), 127);
        assert_eq!(Outcome::setup_failed(err(Step::Exec, Some(Errno::EACCES))).exit_code(), 126);
        assert_eq!(Outcome::setup_failed(err(Step::Exec, Some(Errno::E2BIG))).exit_code(), 125);
    }

    #[test]
    fn error_serializes_step_and_errno_by_name() {
        let e = err(Step::PivotRoot, Some(Errno::EINVAL)).with_hint("fix it".to_string());
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({"step": "pivot_root", "errno": "EINVAL", "message": "", "hint": "fix it"})
        );
        let e = err(Phase::Plan, None);
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({"step": "plan", "errno": null, "message": "", "hint": null})
        );
    }

    #[test]
    fn a_verdict_hides_its_own_requests_secrets_and_no_others() {
        let secret = |n: &str, v: &str| crate::redact::Secret { name: n.into(), value: v.as_bytes().to_vec() };
        let o = Outcome::setup_failed(
            ErrorReport::new(Step::Exec, "/opt/alpha-123/run: not found").with_hint("try bravo-456".to_string()),
        );
        let a = Redaction::new([secret("A", "alpha-123")], false);
        let b = Redaction::new([secret("B", "bravo-456")], false);
        let va = serde_json::to_value(Verdict::new("", "none", &o, None, true, &a)).unwrap();
        let vb = serde_json::to_value(Verdict::new("", "none", &o, None, true, &b)).unwrap();
        assert_eq!(va["error"]["message"], "/opt/[husk: secret A]/run: not found");
        assert_eq!(va["error"]["hint"], "try bravo-456");
        assert_eq!(vb["error"]["message"], "/opt/alpha-123/run: not found");
        assert_eq!(vb["error"]["hint"], "try [husk: secret B]");
    }

    #[test]
    fn verdict_keys_match_the_documented_schema() {
        let schema: serde_json::Value = serde_json::from_str(include_str!("../docs/verdict.schema.json")).unwrap();
        let required: Vec<&str> = schema["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let o = ended(Termination::Exited, Some(0), None);
        let iso = Isolation::default();
        let v = serde_json::to_value(Verdict::new("id", "native", &o, Some(&iso), true, &Redaction::none())).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        for k in &required {
            assert!(keys.contains(k), "verdict lacks documented key {k}");
        }
        for k in &keys {
            assert!(schema["properties"].get(*k).is_some(), "verdict key {k} is not documented in the schema");
        }
        let term = schema["properties"]["termination"]["enum"].as_array().unwrap();
        for t in ["exited", "signaled", "wall_timeout", "oom_killed", "setup_failed"] {
            assert!(term.iter().any(|x| x == t), "{t} missing from schema");
        }
    }

    #[test]
    fn signal_names_are_symbolic() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
    }
}
