//! Isolation backends behind one trait: the same `Plan` in, the same
//! `Outcome` out. Selected once per command.

pub mod auto;
pub mod native;
pub mod runsc;

use crate::outcome::Outcome;
use crate::plan::Plan;
use crate::spec::{RuntimeChoice, Spec};
use std::path::Path;

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

/// The backend picked for a run, and (for `--runtime auto`) why.
pub struct Selected {
    pub backend: Box<dyn Backend>,
    /// Goes into the verdict as `isolation.runtime_choice`.
    pub note: Option<serde_json::Value>,
}

/// Picks the backend for a run. `state` is husk's `--state-dir`, if given.
/// Explain mode answers seccomp notifications from the host kernel; under
/// runsc the profile is enforced inside gVisor, where husk cannot see them.
const REPORT_NATIVE_ONLY: &str = "--seccomp-report needs the native backend (under runsc, gVisor enforces the profile inside its own kernel); drop --seccomp-report or use --runtime native";

pub fn select(spec: &Spec, state: Option<&Path>) -> Result<Selected, String> {
    let (runsc, note) = choose_runsc(spec, || runsc::config::state_dir(state))?;
    let backend: Box<dyn Backend> = match runsc {
        Some(cfg) => Box::new(runsc::Runsc::new(cfg)),
        None => Box::new(native::Native),
    };
    Ok(Selected { backend, note })
}

/// The runsc to use, or None for native, and (for `--runtime auto`) why:
/// the one rule for `husk run` and `husk create`. `state_dir` (husk's
/// state directory, where runsc keeps its own) is asked only when runsc
/// may be used.
pub fn choose_runsc(
    spec: &Spec,
    state_dir: impl FnOnce() -> Result<std::path::PathBuf, String>,
) -> Result<(Option<runsc::config::RunscConfig>, Option<serde_json::Value>), String> {
    let runsc_cfg = || runsc::config::RunscConfig::resolve(&spec.runsc, &state_dir()?);
    match spec.runtime {
        RuntimeChoice::Native => Ok((None, None)),
        RuntimeChoice::Runsc => {
            if spec.seccomp_report {
                return Err(REPORT_NATIVE_ONLY.into());
            }
            let cfg = runsc_cfg().map_err(|e| format!("--runtime runsc: {e}"))?;
            let blockers = auto::runsc_blockers(&auto::HostView::probe(), &cfg.platform);
            if !blockers.is_empty() {
                return Err(format!("--runtime runsc cannot work on this host: {}", blockers.join("; ")));
            }
            Ok((Some(cfg), None))
        }
        RuntimeChoice::Auto => {
            let (pick, note) = auto::choose(auto::Facts::probe(&auto::HostView::probe(), runsc_cfg))?;
            match pick {
                auto::Pick::Native => Ok((None, Some(note))),
                auto::Pick::Runsc(_) if spec.seccomp_report => {
                    Err(format!("--runtime auto picked runsc ({note}), but {REPORT_NATIVE_ONLY}"))
                }
                auto::Pick::Runsc(cfg) => Ok((Some(cfg), Some(note))),
            }
        }
    }
}

/// The isolation keys every backend reports the same way; each backend
/// passes what differs (namespaces, id mapping) and may add its own keys.
pub fn isolation_report(plan: &Plan, namespaces: &[&str], user_mapping: serde_json::Value) -> serde_json::Value {
    let caps: Vec<String> = caps::all()
        .into_iter()
        .filter(|c| (c.index() as u32) <= plan.last_cap && plan.process.caps_keep & (1u64 << c.index()) != 0)
        .map(|c| c.to_string())
        .collect();
    serde_json::json!({
        "namespaces": namespaces,
        "user_mapping": user_mapping,
        "user": { "uid": plan.process.uid, "gid": plan.process.gid },
        "network": match plan.network { crate::spec::NetworkMode::None => "none", crate::spec::NetworkMode::Host => "host" },
        "rootfs": plan.mounts.report,
        "capabilities": caps,
        "no_new_privs": true,
        "seccomp": crate::seccomp::isolation(plan.seccomp.as_ref()),
        "downgrades": plan.cgroup.downgrades(),
    })
}
