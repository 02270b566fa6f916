//! What the verdict says about limits (`limits`: requested and applied) and
//! usage (`resources`), and how an OOM kill becomes the run's termination.
//!
//! Fields stay in alphabetical order: the verdict's keys have always come
//! out sorted, and consumers that diff verdicts keep seeing the same bytes.
//! The limits are `Deserialize` too: a sandbox's record keeps them for its
//! execs' verdicts.

use super::limits::Source;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// The cgroup itself: where it lives and how husk joins and kills it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CgroupInfo {
    /// `cgroup.kill`, `freeze+sigkill` or `sigkill`.
    pub kill: Cow<'static, str>,
    /// `clone_into_cgroup` (born inside, v2), `clone_into_cgroup+self_attach`
    /// (hybrid: the child moves itself into the v1 hierarchies before it
    /// does anything else) or `self_attach` (v1).
    pub membership: Cow<'static, str>,
    /// `v2`, `hybrid` or `v1`.
    pub mode: Cow<'static, str>,
    pub paths: Vec<String>,
}

/// One limit: what was asked, and what the kernel holds after husk wrote
/// it (read back from `file`). `null` means unlimited.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(from = "LimitKeys")]
pub struct Limit {
    pub applied: Option<u64>,
    pub file: Option<Cow<'static, str>>,
    pub requested: Option<u64>,
    pub source: Option<Source>,
    /// Set when the backend bounds the workload somewhere else than this
    /// cgroup, which then holds a larger budget (`applied`) for the
    /// backend's own machinery too (runsc: see `Adapted`). Its keys sit
    /// among the limit's own, in alphabetical order.
    pub adapted: Option<Adapted>,
}

impl Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("applied", &self.applied)?;
        if let Some(a) = &self.adapted {
            m.serialize_entry("applied_as", &a.applied_as)?;
        }
        m.serialize_entry("file", &self.file)?;
        m.serialize_entry("requested", &self.requested)?;
        m.serialize_entry("source", &self.source)?;
        if let Some(a) = &self.adapted {
            m.serialize_entry("workload_limit", &a.workload_limit)?;
        }
        m.end()
    }
}

/// A limit's keys as the verdict has them (`Adapted`'s among them).
#[derive(Deserialize)]
struct LimitKeys {
    applied: Option<u64>,
    #[serde(default)]
    applied_as: Option<String>,
    file: Option<Cow<'static, str>>,
    requested: Option<u64>,
    source: Option<Source>,
    #[serde(default)]
    workload_limit: Option<u64>,
}

impl From<LimitKeys> for Limit {
    fn from(k: LimitKeys) -> Limit {
        Limit {
            applied: k.applied,
            file: k.file,
            requested: k.requested,
            source: k.source,
            adapted: k.applied_as.map(|applied_as| Adapted { workload_limit: k.workload_limit, applied_as }),
        }
    }
}

/// How a backend applies a limit that the cgroup alone would not express
/// as the user means it. Under runsc the cgroup holds gVisor's sentry and
/// gofer besides the workload, so it gets the workload's limit plus
/// gVisor's budget, and the workload's own bound (where gVisor has one) is
/// applied inside gVisor.
#[derive(Clone, Debug, Default, PartialEq)]
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

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct SwapLimit {
    /// Swap the run may use beyond its memory limit, as applied: 0 = none,
    /// null = unlimited.
    pub applied_bytes: Option<u64>,
    /// The file written, or why nothing had to be (`host has no swap`).
    pub how: Cow<'static, str>,
    /// `off`, `limited` (--memory-swap SIZE) or `unlimited`.
    pub requested: Cow<'static, str>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CpuLimit {
    /// quota / period as read back.
    pub applied: f64,
    pub file: Cow<'static, str>,
    pub period_us: u64,
    pub quota_us: u64,
    /// `--cpus` as given.
    pub requested: f64,
}

/// The cgroup limits applied to a run or a sandbox.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct LimitsReport {
    pub cgroup: CgroupInfo,
    /// null: no cpu quota.
    pub cpus: Option<CpuLimit>,
    pub memory: Limit,
    pub pids: Limit,
    pub swap: SwapLimit,
}

/// The verdict's `limits`: the cgroup's, or the string `none` for a run
/// without a cgroup (`--no-cgroup`).
#[derive(Clone, Debug, PartialEq)]
pub enum AppliedLimits {
    Cgroup(Box<LimitsReport>),
    NoCgroup,
}

const NO_CGROUP: &str = "none";

impl Serialize for AppliedLimits {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            AppliedLimits::Cgroup(r) => r.serialize(s),
            AppliedLimits::NoCgroup => s.serialize_str(NO_CGROUP),
        }
    }
}

impl<'de> Deserialize<'de> for AppliedLimits {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Word(String),
            Cgroup(Box<LimitsReport>),
        }
        match Either::deserialize(d)? {
            Either::Cgroup(r) => Ok(AppliedLimits::Cgroup(r)),
            Either::Word(w) if w == NO_CGROUP => Ok(AppliedLimits::NoCgroup),
            Either::Word(w) => {
                Err(serde::de::Error::custom(format!("limits: expected an object or \"{NO_CGROUP}\", not \"{w}\"")))
            }
        }
    }
}

/// The verdict's `resources`: what the run used, from the cgroup's
/// counters. Fields are null where the kernel does not keep the counter.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// Set when the cgroup could not be removed (`husk gc` retries).
    pub cleanup_error: Option<String>,
    pub cpu_system_usec: Option<u64>,
    pub cpu_throttled_periods: Option<u64>,
    pub cpu_throttled_usec: Option<u64>,
    pub cpu_user_usec: Option<u64>,
    /// husk killed the whole cgroup (timeout, second Ctrl-C, leftovers).
    pub group_killed: bool,
    /// Times an allocation hit the memory limit (memory.events max / failcnt).
    pub memory_limit_hits: Option<u64>,
    pub memory_peak_bytes: Option<u64>,
    /// Processes the OOM killer killed in the sandbox (any of them, not
    /// only the command).
    pub oom_kills: Option<u64>,
    pub pids_limit_hit: bool,
    /// Fork/clone attempts refused by the pids limit.
    pub pids_limit_hits: Option<u64>,
    pub pids_peak: Option<u64>,
}

/// Everything the cgroup facility reports for one run.
#[derive(Clone, Debug, PartialEq)]
pub struct CgroupReport {
    pub limits: LimitsReport,
    pub usage: Usage,
    pub cleanup: Option<String>,
}

impl CgroupReport {
    /// The verdict's `limits` and `resources` (the OOM rule that may rename
    /// the run's termination from them is `Outcome::add_cgroup`'s).
    pub fn into_verdict(self) -> (AppliedLimits, Usage) {
        let mut usage = self.usage;
        usage.pids_limit_hit = usage.pids_limit_hits.unwrap_or(0) > 0;
        usage.cleanup_error = self.cleanup;
        if let Some(e) = &usage.cleanup_error {
            crate::errln!("husk: warning: {e}; `husk gc` removes stale cgroups");
        }
        (AppliedLimits::Cgroup(Box::new(self.limits)), usage)
    }
}

/// A line for humans on stderr about a limit the run ran into, from the
/// verdict's `limits` and `resources`; `oom_killed`: the run's termination.
pub fn explain(limits: Option<&AppliedLimits>, res: Option<&Usage>, oom_killed: bool) -> Option<String> {
    let res = res?;
    let lim = match limits? {
        AppliedLimits::Cgroup(l) => Some(l),
        AppliedLimits::NoCgroup => None,
    };
    let size = crate::units::format_size;
    // An adapted limit (runsc) names what the user asked and the host
    // cgroup's larger value, which is what was hit.
    let mem = match lim.map(|l| &l.memory) {
        Some(m @ Limit { applied: Some(applied), .. }) => match (&m.adapted, m.requested) {
            (Some(_), Some(req)) => format!("{} (host cgroup {}, with the backend's share)", size(req), size(*applied)),
            _ => size(*applied),
        },
        _ => "?".into(),
    };
    let peak = res.memory_peak_bytes.map(|p| format!(", peak {}", size(p))).unwrap_or_default();
    let ooms = res.oom_kills.unwrap_or(0);
    if oom_killed {
        return Some(format!("killed by the OOM killer at the {mem} memory limit{peak} (--memory)"));
    }
    if ooms > 0 {
        return Some(format!(
            "the OOM killer killed {ooms} process(es) in the sandbox at the {mem} memory limit{peak}"
        ));
    }
    if res.pids_limit_hit {
        let max = lim.and_then(|l| l.pids.applied).map(|n| n.to_string()).unwrap_or_else(|| "?".into());
        let n = res.pids_limit_hits.unwrap_or(0);
        if let Some(Limit { adapted: Some(_), requested: Some(req), .. }) = lim.map(|l| &l.pids) {
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
    use crate::outcome::{ErrorReport, Outcome, Termination};

    fn outcome(t: Termination, status: Option<i32>, signal: Option<i32>) -> Outcome {
        let mut o = Outcome::setup_failed(ErrorReport::new(crate::step::Phase::Setup, ""));
        o.error = None;
        o.termination = t;
        o.status = status;
        o.signal = signal;
        o
    }

    fn explain_outcome(o: &Outcome) -> Option<String> {
        explain(o.limits.as_ref(), o.resources.as_ref(), o.termination == Termination::OomKilled)
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
        o.add_cgroup(report(1, 0));
        assert_eq!(o.termination, Termination::OomKilled);
        assert_eq!(o.exit_code(), 137);
        assert_eq!(o.resources.as_ref().unwrap().oom_kills, Some(1));
        assert!(explain_outcome(&o).unwrap().contains("256MiB"));
        // A shell that reports its OOM-killed child as 137.
        let mut o = outcome(Termination::Exited, Some(137), None);
        o.add_cgroup(report(1, 0));
        assert_eq!(o.termination, Termination::OomKilled);
    }

    #[test]
    fn oom_of_a_child_does_not_rename_a_clean_exit_or_a_timeout() {
        let mut o = outcome(Termination::Exited, Some(0), None);
        o.add_cgroup(report(2, 0));
        assert_eq!(o.termination, Termination::Exited);
        assert!(explain_outcome(&o).unwrap().contains("killed 2 process"));
        let mut o = outcome(Termination::WallTimeout, None, Some(9));
        o.add_cgroup(report(1, 0));
        assert_eq!(o.termination, Termination::WallTimeout);
        let mut o = outcome(Termination::Signaled, None, Some(9));
        o.add_cgroup(report(0, 0));
        assert_eq!(o.termination, Termination::Signaled);
    }

    #[test]
    fn pids_limit_hit_is_flagged() {
        let mut o = outcome(Termination::Exited, Some(2), None);
        o.add_cgroup(report(0, 5));
        assert!(o.resources.as_ref().unwrap().pids_limit_hit);
        assert!(explain_outcome(&o).unwrap().contains("64 tasks"));
        let mut o = outcome(Termination::Exited, Some(0), None);
        o.no_cgroup();
        assert_eq!(serde_json::to_value(&o.limits).unwrap(), serde_json::json!("none"));
    }
}
