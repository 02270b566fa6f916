//! `husk gc`: removes what runs that died before their own cleanup left
//! behind. One small function per resource kind, each returning its part
//! of the report.

use crate::cgroup::{self, Caller};
use crate::cli::GcArgs;
use crate::host::HostFacts;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Serialize, Debug, Default)]
pub struct Report {
    pub cgroups: cgroup::gc::GcReport,
}

/// Stale run cgroups under husk's parents (and `--cgroup-parent`).
pub fn gc_cgroups(host: &HostFacts, args: &GcArgs) -> cgroup::gc::GcReport {
    let who = Caller { uid: host.uid, privileged: host.privileged };
    let mut parents = cgroup::gc::parents(&host.cgroup, None, who);
    if let Some(p) = &args.cgroup_parent {
        let rel = PathBuf::from(p.trim_matches('/'));
        if rel.as_os_str().is_empty() || rel.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            return cgroup::gc::GcReport {
                errors: vec![format!("invalid --cgroup-parent {p:?}: give a path below the cgroup mount")],
                ..Default::default()
            };
        }
        parents.extend(cgroup::gc::parents(&host.cgroup, Some(&rel), who));
    }
    cgroup::gc::collect(&parents, args.min_age)
}

pub fn gc(args: GcArgs) -> i32 {
    let host = HostFacts::probe();
    let report = Report { cgroups: gc_cgroups(&host, &args) };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        let c = &report.cgroups;
        for d in &c.removed {
            println!("removed cgroup {d}");
        }
        for d in &c.busy {
            println!("kept cgroup {d}: it still has processes");
        }
        for e in &c.errors {
            eprintln!("husk: gc: {e}");
        }
        println!("cgroups: {} removed, {} busy, {} too young", c.removed.len(), c.busy.len(), c.young.len());
    }
    if report.cgroups.errors.is_empty() { 0 } else { 1 }
}
