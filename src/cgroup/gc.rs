//! Stale cgroups: the leaves a husk that was killed (or crashed) before its
//! cleanup left behind. Only directories named like a run id directly
//! under husk's own parents are candidates, and only empty ones go.

use super::probe::CgroupHost;
use super::{Caller, parent_in};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

#[derive(Serialize, Debug, Default, Clone, PartialEq, Eq)]
pub struct GcReport {
    pub removed: Vec<String>,
    /// Still holding processes: left alone (a live run, or a sandbox that
    /// outlived its husk; kill it first).
    pub busy: Vec<String>,
    /// Younger than the minimum age: possibly a run being set up right now.
    pub young: Vec<String>,
    /// Not looked at: the gc was given a state dir of its own, and runs'
    /// cgroups belong to no state dir (cmd/gc.rs `gc_cgroups`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub left_alone: bool,
    pub errors: Vec<String>,
}

/// husk's parent directory in every mounted hierarchy husk can use as `who`
/// (for rootless users: in the delegated subtree, where there is one).
pub fn parents(host: &CgroupHost, custom: Option<&Path>, who: Caller) -> Vec<PathBuf> {
    host.unified.iter().chain(&host.v1).filter_map(|m| parent_in(m, custom, who, "gc").ok().map(|(_, p)| p)).collect()
}

/// Run ids are 12 lowercase hex digits (`ids::new_id`).
pub fn is_run_id(name: &str) -> bool {
    name.len() == 12 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Removes empty run cgroups older than `min_age` under each parent.
pub fn collect(parents: &[PathBuf], min_age: Duration) -> GcReport {
    let mut r = GcReport::default();
    let now = SystemTime::now();
    for parent in parents {
        let entries = match std::fs::read_dir(parent) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                r.errors.push(format!("listing {}: {e}", parent.display()));
                continue;
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|n| is_run_id(n)) else { continue };
            let dir = parent.join(name);
            let Ok(meta) = std::fs::symlink_metadata(&dir) else { continue };
            if !meta.is_dir() {
                continue;
            }
            let shown = dir.display().to_string();
            let age = meta.modified().ok().and_then(|m| now.duration_since(m).ok()).unwrap_or_default();
            if age < min_age {
                r.young.push(shown);
                continue;
            }
            match std::fs::read_to_string(dir.join("cgroup.procs")) {
                Ok(p) if !super::fs::pids(&p).is_empty() => r.busy.push(shown),
                Ok(_) => match std::fs::remove_dir(&dir) {
                    Ok(()) => r.removed.push(shown),
                    Err(e) => r.errors.push(format!("removing {shown}: {e}")),
                },
                Err(e) => r.errors.push(format!("reading {shown}/cgroup.procs: {e}")),
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_run_ids_are_candidates() {
        assert!(is_run_id("0123456789ab"));
        assert!(!is_run_id("0123456789AB"));
        assert!(!is_run_id("process_api"));
        assert!(!is_run_id("0123456789abc"));
        assert!(!is_run_id("system.slice"));
    }

    #[test]
    fn young_and_foreign_directories_are_left_alone() {
        let t = std::env::temp_dir().join(format!("husk-gc-{}", std::process::id()));
        let parent = t.join("husk");
        for d in ["0123456789ab", "not-a-run", "bbbbbbbbbbbb"] {
            std::fs::create_dir_all(parent.join(d)).unwrap();
        }
        std::fs::write(parent.join("0123456789ab/cgroup.procs"), "").unwrap();
        std::fs::write(parent.join("bbbbbbbbbbbb/cgroup.procs"), "42\n").unwrap();
        let r = collect(std::slice::from_ref(&parent), Duration::from_secs(3600));
        assert_eq!(r.young.len(), 2);
        assert!(r.removed.is_empty());
        let r = collect(std::slice::from_ref(&parent), Duration::ZERO);
        assert_eq!(r.busy, vec![parent.join("bbbbbbbbbbbb").display().to_string()]);
        // The empty one holds a plain file here (a real cgroup dir would
        // not), so rmdir fails and is reported, not hidden.
        assert_eq!(r.errors.len(), 1, "{r:?}");
        assert!(parent.join("not-a-run").exists());
        std::fs::remove_dir_all(&t).unwrap();
    }
}
