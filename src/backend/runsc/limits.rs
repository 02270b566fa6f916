//! `--pids` and `--memory` under gVisor, bounding the workload as the user
//! means it.
//!
//! runsc, its gofer and its sentry are born in the run's cgroup, so that
//! cgroup counts gVisor's machinery besides the workload: with the ptrace
//! platform every task inside gVisor costs 27 to 47 host tasks (sentry
//! threads and the stub processes of each address space; measured with
//! background `sleep`s, busy loops and a fork bomb, more per task the more
//! tasks there are), and the sentry and gofer hold about 20 MiB before the
//! command allocates anything. A cgroup limit of N tasks let a workload
//! start barely two background processes under `--pids 64`.
//!
//! So each limit is split:
//! - pids: RLIMIT_NPROC N for the command inside gVisor (gVisor's kernel
//!   enforces it, counting tasks per user as Linux does), and the host
//!   cgroup gets `N * HOST_TASKS_PER_TASK + HOST_TASKS_BASE` for gVisor's
//!   machinery, so the host stays bounded even if that budget is
//!   overrun. CAP_SYS_ADMIN and CAP_SYS_RESOURCE bypass RLIMIT_NPROC inside
//!   gVisor (gVisor's root holds them for real there), and CAP_SETUID lets
//!   the workload spread over more users: with any of them an explicit
//!   `--pids` is refused (fail closed), and husk's default is kept on the
//!   host cgroup alone, as the verdict says.
//! - memory: gVisor keeps no memory limit of its own (the OCI spec's
//!   memory limit only sizes what it reports as total memory), so the
//!   host cgroup gets the workload's limit plus `MEMORY_BASE` for the
//!   sentry and gofer. The sentry's memory per process (about 1.2 MiB
//!   measured, mostly the host tasks above) still counts against the
//!   workload's share.
//!
//! A host cgroup budget above half the host's pid_max is refused: a few
//! sandboxes could then take every pid on the host.

use crate::cgroup::report::AppliedLimits;
use crate::cgroup::{Adaptation, Adapted, Limits, Source, Swap};
use crate::plan::Plan;

/// Host tasks the cgroup allows per task inside gVisor (measured 27 to 47
/// with the ptrace platform; see the module docs and docs/cgroups.md).
pub const HOST_TASKS_PER_TASK: u64 = 48;
/// Host tasks for the sandbox itself (runsc, gofer, sentry: 58 measured
/// with an idle command).
pub const HOST_TASKS_BASE: u64 = 256;
/// Memory for gVisor's sentry and gofer on top of the workload's limit
/// (about 20 MiB measured with an idle command).
pub const MEMORY_BASE: u64 = 32 << 20;
/// husk's default `--pids` under runsc: each task costs dozens of host
/// tasks, so the native default (1024) would need more host pids than many
/// hosts have (pid_max is often 32768).
pub const DEFAULT_PIDS: u64 = 256;

const CAP_SETUID: u32 = 7;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_RESOURCE: u32 = 24;

#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    #[error(
        "--pids {pids} cannot bound the command under --runtime runsc: it holds {cap}, which lets it escape RLIMIT_NPROC, the only task limit gVisor applies inside the sandbox"
    )]
    CapabilityBypass { pids: u64, cap: &'static str },
    #[error(
        "--pids {pids} under --runtime runsc needs a host budget of {budget} tasks for gVisor's machinery ({HOST_TASKS_PER_TASK} per sandbox task + {HOST_TASKS_BASE}), more than half of this host's kernel.pid_max ({pid_max})"
    )]
    TooManyPids { pids: u64, budget: u64, pid_max: u64, max: u64 },
}

impl LimitsError {
    pub fn hint(&self) -> String {
        match self {
            LimitsError::CapabilityBypass { cap, .. } => format!(
                "drop --cap-add {}, run under the native runtime, or pass --pids unlimited to run without a task limit",
                cap.trim_start_matches("CAP_")
            ),
            LimitsError::TooManyPids { max, .. } => {
                format!("give --pids {max} or less, or run under the native runtime")
            }
        }
    }
}

/// The host's kernel.pid_max (0 when unreadable: no cap is applied).
pub fn pid_max() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// The host cgroup's pids budget for `pids` tasks inside gVisor.
pub fn host_tasks(pids: u64) -> u64 {
    pids.saturating_mul(HOST_TASKS_PER_TASK).saturating_add(HOST_TASKS_BASE)
}

/// The most tasks inside gVisor whose budget fits in half of `pid_max`.
fn max_pids(pid_max: u64) -> u64 {
    (pid_max / 2).saturating_sub(HOST_TASKS_BASE) / HOST_TASKS_PER_TASK
}

/// Which capability of `caps` gets around RLIMIT_NPROC inside gVisor.
fn bypass(caps: u64) -> Option<&'static str> {
    [(CAP_SYS_ADMIN, "CAP_SYS_ADMIN"), (CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE"), (CAP_SETUID, "CAP_SETUID")]
        .into_iter()
        .find(|(bit, _)| caps & (1u64 << bit) != 0)
        .map(|(_, name)| name)
}

/// Splits the plan's limits between gVisor and the host cgroup (see the
/// module docs). `caps`: the command's capabilities.
pub fn adapt(limits: &mut Limits, caps: u64, pid_max: u64) -> Result<Adaptation, LimitsError> {
    let mut a = Adaptation::default();
    if let Some(mut n) = limits.pids {
        let max = if pid_max == 0 { u64::MAX } else { max_pids(pid_max) };
        if limits.pids_source == Source::Default {
            n = n.min(DEFAULT_PIDS).min(max);
        }
        let budget = host_tasks(n);
        if n > max {
            return Err(LimitsError::TooManyPids { pids: n, budget, pid_max, max });
        }
        let adapted = match (bypass(caps), limits.pids_source) {
            (Some(cap), Source::Flag) => return Err(LimitsError::CapabilityBypass { pids: n, cap }),
            (Some(cap), Source::Default) => Adapted {
                workload_limit: None,
                applied_as: format!(
                    "host cgroup pids.max {budget} only (budget for {n} tasks inside gVisor: {HOST_TASKS_PER_TASK} each + {HOST_TASKS_BASE}); no RLIMIT_NPROC inside gVisor, which the command's {cap} would bypass"
                ),
            },
            (None, _) => Adapted {
                workload_limit: Some(n),
                applied_as: format!(
                    "RLIMIT_NPROC {n} for the command inside gVisor + host cgroup pids.max {budget} for gVisor's sentry and gofer ({HOST_TASKS_PER_TASK} host tasks per sandbox task + {HOST_TASKS_BASE})"
                ),
            },
        };
        limits.pids = Some(budget);
        a.pids = Some((n, adapted));
    }
    if let Some(m) = limits.memory {
        let host = m.saturating_add(MEMORY_BASE);
        limits.memory = Some(host);
        if let Swap::Total(t) = limits.swap {
            limits.swap = Swap::Total(t.saturating_add(MEMORY_BASE));
        }
        let size = crate::units::format_size;
        a.memory = Some((
            m,
            Adapted {
                workload_limit: None,
                applied_as: format!(
                    "host cgroup limit {} = the command's {} + {} for gVisor's sentry and gofer; gVisor keeps no memory limit of its own, and its memory per process inside (about 1.2MiB) counts against the command's share",
                    size(host),
                    size(m),
                    size(MEMORY_BASE)
                ),
            },
        ));
    }
    Ok(a)
}

/// `adapt` for a plan about to run under runsc.
pub fn adapt_plan(plan: &mut Plan) -> Result<(), LimitsError> {
    let caps = plan.process.caps_keep;
    let pid_max = pid_max();
    plan.cgroup.adapt(|l| adapt(l, caps, pid_max))
}

/// RLIMIT_NPROC for the command inside gVisor, as the plan's adaptation
/// says (none without a cgroup, or when a capability would bypass it).
pub fn workload_nproc(plan: &Plan) -> Option<u64> {
    plan.cgroup.adaptation()?.pids.as_ref()?.1.workload_limit
}

/// The same, read back from a live sandbox's recorded `limits` (for its
/// execs, which `runsc exec` starts with rlimits of their own).
pub fn workload_nproc_of(limits: Option<&AppliedLimits>) -> Option<u64> {
    match limits? {
        AppliedLimits::Cgroup(l) => l.pids.adapted.as_ref()?.workload_limit,
        AppliedLimits::NoCgroup => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::Limits;

    fn limits(pids: Option<u64>, pids_source: Source, memory: Option<u64>) -> Limits {
        Limits { memory, memory_source: Source::Flag, swap: Swap::Off, cpu: None, pids, pids_source }
    }

    #[test]
    fn pids_become_an_rlimit_inside_and_a_machinery_budget_on_the_host() {
        let mut l = limits(Some(64), Source::Flag, None);
        let a = adapt(&mut l, 0, 32768).unwrap();
        assert_eq!(l.pids, Some(64 * HOST_TASKS_PER_TASK + HOST_TASKS_BASE));
        let (requested, adapted) = a.pids.unwrap();
        assert_eq!((requested, adapted.workload_limit), (64, Some(64)));
        assert!(adapted.applied_as.contains("RLIMIT_NPROC 64") && adapted.applied_as.contains("3328"), "{adapted:?}");
    }

    #[test]
    fn an_explicit_limit_a_capability_would_escape_is_refused() {
        for cap in [CAP_SYS_ADMIN, CAP_SYS_RESOURCE, CAP_SETUID] {
            let mut l = limits(Some(64), Source::Flag, None);
            let e = adapt(&mut l, 1 << cap, 32768).unwrap_err();
            assert!(matches!(e, LimitsError::CapabilityBypass { .. }), "{e}");
            assert!(e.hint().contains("--pids unlimited"));
        }
        // husk's default stays on the host cgroup, and says so.
        let mut l = limits(Some(1024), Source::Default, None);
        let (_, a) = adapt(&mut l, 1 << CAP_SYS_ADMIN, 32768).unwrap().pids.unwrap();
        assert_eq!(a.workload_limit, None);
        assert!(a.applied_as.contains("CAP_SYS_ADMIN"), "{a:?}");
    }

    #[test]
    fn budgets_beyond_half_the_hosts_pids_are_refused_and_the_default_fits() {
        let mut l = limits(Some(1000), Source::Flag, None);
        let e = adapt(&mut l, 0, 32768).unwrap_err();
        let LimitsError::TooManyPids { max, .. } = e else { panic!("{e}") };
        assert_eq!(max, (16384 - HOST_TASKS_BASE) / HOST_TASKS_PER_TASK);
        assert!(host_tasks(max) <= 16384);
        let mut l = limits(Some(1024), Source::Default, None);
        let (n, _) = adapt(&mut l, 0, 32768).unwrap().pids.unwrap();
        assert_eq!(n, DEFAULT_PIDS);
        let mut l = limits(Some(1024), Source::Default, None);
        let (n, _) = adapt(&mut l, 0, 4096).unwrap().pids.unwrap();
        assert!(n < DEFAULT_PIDS && host_tasks(n) <= 2048, "{n}");
    }

    #[test]
    fn memory_gets_gvisors_base_on_the_host() {
        let mut l = limits(None, Source::Flag, Some(64 << 20));
        l.swap = Swap::Total(128 << 20);
        let a = adapt(&mut l, 0, 32768).unwrap();
        assert_eq!(l.memory, Some((64 << 20) + MEMORY_BASE));
        assert_eq!(l.swap, Swap::Total((128 << 20) + MEMORY_BASE));
        let (requested, adapted) = a.memory.unwrap();
        assert_eq!((requested, adapted.workload_limit), (64 << 20, None));
    }
}
