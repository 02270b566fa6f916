//! What the verdict says about limits (`limits`: requested and applied) and
//! usage (`resources`), and how an OOM kill becomes the run's termination.

use super::limits::Source;
use crate::outcome::{Outcome, Termination};
use serde::Serialize;

/// The cgroup itself: where it lives and how husk joins and kills it.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct CgroupInfo {
    /// `v2`, `hybrid` or `v1`.
    pub mode: &'static str,
    pub paths: Vec<String>,
    /// `clone_into_cgroup` (born inside, v2), `clone_into_cgroup+self_attach`
    /// (hybrid: the child moves itself into the v1 hierarchies before it
    /// does anything else) or `self_attach` (v1).
    pub membership: &'static str,
    /// `cgroup.kill`, `freeze+sigkill` or `sigkill`.
    pub kill: &'static str,
}

/// One limit: what was asked, and what the kernel holds after husk wrote
/// it (read back from `file`). `null` means unlimited.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Limit {
    pub requested: Option<u64>,
    pub source: Option<Source>,
    pub applied: Option<u64>,
    pub file: Option<&'static str>,
    /// Set when the backend bounds the workload somewhere else than this
    /// cgroup, which then holds a larger budget (`applied`) for the
    /// backend's own machinery too (runsc: see `Adapted`).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub adapted: Option<Adapted>,
}

/// How a backend applies a limit that the cgroup alone would not express
/// as the user means it. Under runsc the cgroup holds gVisor's sentry and
/// gofer besides the workload, so it gets the workload's limit plus
/// gVisor's budget, and the workload's own bound (where gVisor has one) is
/// applied inside gVisor.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Adapted {
    /// The bound on the sandboxed workload itself; null where the backend
    /// has none to apply (gVisor keeps no memory limit of its own).
    pub workload_limit: Option<u64>,
    /// In words: where each part is applied, with its numbers.
    pub applied_as: String,
}

/// A backend's adaptation of a plan's limits (`CgroupPlan::adapt`): for
/// each limit, what the user asked (reported as `requested`) and how it is
/// applied. The plan's `Limits` then hold the cgroup's larger values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Adaptation {
    pub memory: Option<(u64, Adapted)>,
    pub pids: Option<(u64, Adapted)>,
}

impl Adaptation {
    /// Puts the user's values and the adaptation into a report made from
    /// the adapted limits.
    pub fn annotate(&self, r: &mut LimitsReport) {
        for (limit, a) in [(&mut r.memory, &self.memory), (&mut r.pids, &self.pids)] {
            if let Some((requested, adapted)) = a {
                limit.requested = Some(*requested);
                limit.adapted = Some(adapted.clone());
            }
        }
    }
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct SwapLimit {
    /// `off`, `limited` (--memory-swap SIZE) or `unlimited`.
    pub requested: &'static str,
    /// Swap the run may use beyond its memory limit, as applied: 0 = none,
    /// null = unlimited.
    pub applied_bytes: Option<u64>,
    /// The file written, or why nothing had to be (`host has no swap`).
    pub how: &'static str,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct CpuLimit {
    /// `--cpus` as given.
    pub requested: f64,
    /// quota / period as read back.
    pub applied: f64,
    pub quota_us: u64,
    pub period_us: u64,
    pub file: &'static str,
}

/// The verdict's `limits` (for `--no-cgroup` it is the string `none`).
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct LimitsReport {
    pub cgroup: CgroupInfo,
    pub memory: Limit,
    pub swap: SwapLimit,
    /// null: no cpu quota.
    pub cpus: Option<CpuLimit>,
    pub pids: Limit,
}

/// The verdict's `resources`: what the run used, from the cgroup's
/// counters. Fields are null where the kernel does not keep the counter.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Usage {
    pub memory_peak_bytes: Option<u64>,
    /// Times an allocation hit the memory limit (memory.events max / failcnt).
    pub memory_limit_hits: Option<u64>,
    /// Processes the OOM killer killed in the sandbox (any of them, not
    /// only the command).
    pub oom_kills: Option<u64>,
    pub cpu_user_usec: Option<u64>,
    pub cpu_system_usec: Option<u64>,
    pub cpu_throttled_periods: Option<u64>,
    pub cpu_throttled_usec: Option<u64>,
    pub pids_peak: Option<u64>,
    /// Fork/clone attempts refused by the pids limit.
    pub pids_limit_hits: Option<u64>,
    pub pids_limit_hit: bool,
    /// husk killed the whole cgroup (timeout, second Ctrl-C, leftovers).
    pub group_killed: bool,
    /// Set when the cgroup could not be removed (`husk gc` retries).
    pub cleanup_error: Option<String>,
}

/// Everything the cgroup facility reports for one run.
#[derive(Clone, Debug, PartialEq)]
pub struct CgroupReport {
    pub limits: LimitsReport,
    pub usage: Usage,
    pub cleanup: Option<String>,
}

impl CgroupReport {
    /// Fills the verdict slots and names an OOM kill as the termination
    /// when the command died of SIGKILL (or a shell reported 137 for it)
    /// and the cgroup's OOM counter moved. A fresh cgroup starts at zero,
    /// so any count is this run's; husk's timeout kill takes precedence.
    pub fn apply_to(self, o: &mut Outcome) {
        let mut usage = self.usage;
        usage.pids_limit_hit = usage.pids_limit_hits.unwrap_or(0) > 0;
        usage.cleanup_error = self.cleanup;
        if let Some(e) = &usage.cleanup_error {
            crate::errln!("husk: warning: {e}; `husk gc` removes stale cgroups");
        }
        if usage.oom_kills.unwrap_or(0) > 0 {
            let killed = match o.termination {
                Termination::Signaled => o.signal == Some(libc::SIGKILL),
                Termination::Exited => o.status == Some(128 + libc::SIGKILL),
                _ => false,
            };
            if killed {
                o.termination = Termination::OomKilled;
                o.signal = Some(libc::SIGKILL);
            }
        }
        o.limits = serde_json::to_value(&self.limits).ok();
        o.resources = serde_json::to_value(&usage).ok();
    }

    /// The verdict of a run without cgroup (`--no-cgroup`).
    pub fn disabled(o: &mut Outcome) {
        o.limits = Some(serde_json::Value::String("none".into()));
    }
}

/// A line for humans on stderr about a limit the run ran into.
pub fn explain(o: &Outcome) -> Option<String> {
    let res = o.resources.as_ref()?;
    let lim = o.limits.as_ref()?;
    let size = |v: &serde_json::Value| v.as_u64().map(crate::units::format_size);
    // An adapted limit (runsc) names what the user asked and the host
    // cgroup's larger value, which is what was hit.
    let adapted = |l: &serde_json::Value, what: String| match (l.get("applied_as"), size(&l["requested"])) {
        (Some(_), Some(req)) if what != "?" => format!("{req} (host cgroup {what}, with the backend's share)"),
        _ => what,
    };
    let mem = adapted(&lim["memory"], size(&lim["memory"]["applied"]).unwrap_or_else(|| "?".into()));
    let peak = size(&res["memory_peak_bytes"]).map(|p| format!(", peak {p}")).unwrap_or_default();
    let ooms = res["oom_kills"].as_u64().unwrap_or(0);
    if o.termination == Termination::OomKilled {
        return Some(format!("killed by the OOM killer at the {mem} memory limit{peak} (--memory)"));
    }
    if ooms > 0 {
        return Some(format!(
            "the OOM killer killed {ooms} process(es) in the sandbox at the {mem} memory limit{peak}"
        ));
    }
    if res["pids_limit_hit"].as_bool() == Some(true) {
        let max = lim["pids"]["applied"].as_u64().map(|n| n.to_string()).unwrap_or_else(|| "?".into());
        let n = res["pids_limit_hits"].as_u64().unwrap_or(0);
        if let (Some(_), Some(req)) = (lim["pids"].get("applied_as"), lim["pids"]["requested"].as_u64()) {
            return Some(format!(
                "the sandbox hit its host budget of {max} tasks (for --pids {req} and the backend's own tasks); {n} fork(s) failed"
            ));
        }
        return Some(format!("the sandbox hit its limit of {max} tasks; {n} fork(s) failed (--pids)"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::ErrorReport;

    fn outcome(t: Termination, status: Option<i32>, signal: Option<i32>) -> Outcome {
        let mut o = Outcome::setup_failed(ErrorReport::new(crate::step::Phase::Setup, ""));
        o.error = None;
        o.termination = t;
        o.status = status;
        o.signal = signal;
        o
    }

    fn report(oom: u64, pids_hits: u64) -> CgroupReport {
        CgroupReport {
            limits: LimitsReport {
                memory: Limit { applied: Some(256 << 20), ..Default::default() },
                pids: Limit { applied: Some(64), ..Default::default() },
                ..Default::default()
            },
            usage: Usage {
                oom_kills: Some(oom),
                pids_limit_hits: Some(pids_hits),
                memory_peak_bytes: Some(256 << 20),
                ..Default::default()
            },
            cleanup: None,
        }
    }

    #[test]
    fn sigkill_with_an_oom_kill_is_oom_killed_with_exit_137() {
        let mut o = outcome(Termination::Signaled, None, Some(9));
        report(1, 0).apply_to(&mut o);
        assert_eq!(o.termination, Termination::OomKilled);
        assert_eq!(o.exit_code(), 137);
        assert_eq!(o.resources.as_ref().unwrap()["oom_kills"], 1);
        assert!(explain(&o).unwrap().contains("256MiB"));
        // A shell that reports its OOM-killed child as 137.
        let mut o = outcome(Termination::Exited, Some(137), None);
        report(1, 0).apply_to(&mut o);
        assert_eq!(o.termination, Termination::OomKilled);
    }

    #[test]
    fn oom_of_a_child_does_not_rename_a_clean_exit_or_a_timeout() {
        let mut o = outcome(Termination::Exited, Some(0), None);
        report(2, 0).apply_to(&mut o);
        assert_eq!(o.termination, Termination::Exited);
        assert!(explain(&o).unwrap().contains("killed 2 process"));
        let mut o = outcome(Termination::WallTimeout, None, Some(9));
        report(1, 0).apply_to(&mut o);
        assert_eq!(o.termination, Termination::WallTimeout);
        let mut o = outcome(Termination::Signaled, None, Some(9));
        report(0, 0).apply_to(&mut o);
        assert_eq!(o.termination, Termination::Signaled);
    }

    #[test]
    fn pids_limit_hit_is_flagged() {
        let mut o = outcome(Termination::Exited, Some(2), None);
        report(0, 5).apply_to(&mut o);
        assert_eq!(o.resources.as_ref().unwrap()["pids_limit_hit"], true);
        assert!(explain(&o).unwrap().contains("64 tasks"));
        let mut o = outcome(Termination::Exited, Some(0), None);
        CgroupReport::disabled(&mut o);
        assert_eq!(o.limits, Some(serde_json::json!("none")));
    }
}
