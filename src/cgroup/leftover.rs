//! A run's cgroup after its verdict: the directories still to remove once
//! the sandbox's init is gone, without any open file of the cgroup (so it
//! can be handed to a detached reaper, or written down for whoever
//! finishes a teardown that was interrupted).

use super::{CgroupError, KillMethod, fs, v2};
use std::path::{Path, PathBuf};

/// The directories of one run's cgroup, in removal order (the v1 nodes,
/// then the unified one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    dirs: Vec<PathBuf>,
    /// The unified-hierarchy directory, the one group kill goes through.
    unified: Option<PathBuf>,
    kill: KillMethod,
}

impl Leftover {
    pub(super) fn new(dirs: Vec<PathBuf>, unified: Option<PathBuf>, kill: KillMethod) -> Leftover {
        Leftover { dirs, unified, kill }
    }

    /// Removes every directory. A member still there (the teardown was
    /// handed over while the init was alive and it has not quite left
    /// yet, or an outsider joined) is killed once and waited for, as
    /// `fs::rmdir` does on every path.
    pub fn remove(&self) -> Result<(), CgroupError> {
        let mut first_err = None;
        for d in &self.dirs {
            let kill = || {
                let _ = match &self.unified {
                    Some(u) => v2::kill(u, self.kill),
                    None => fs::kill_listed(d),
                };
            };
            if let Err(e) = fs::rmdir(d, &kill, v2::PATIENCE) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// One absolute path per line: what a reaper writes down before it
    /// starts, so that the next one can finish if it is killed.
    pub fn record(&self) -> String {
        self.dirs.iter().map(|d| format!("{}\n", d.display())).collect()
    }

    /// A `record` read back. Only paths that name a run's directory (a run
    /// id under some parent) are taken: the record lives in husk's state
    /// dir, but a path read from a file is never trusted to be a cgroup.
    pub fn from_record(text: &str) -> Option<Leftover> {
        let dirs: Vec<PathBuf> = text
            .lines()
            .map(Path::new)
            .filter(|p| {
                p.is_absolute()
                    && p.starts_with("/sys/fs/cgroup")
                    && !p.components().any(|c| matches!(c, std::path::Component::ParentDir))
                    && p.file_name().and_then(|n| n.to_str()).is_some_and(super::gc::is_run_id)
            })
            .map(Path::to_path_buf)
            .collect();
        (!dirs.is_empty()).then_some(Leftover { dirs, unified: None, kill: KillMethod::Signal })
    }

    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record of an interrupted teardown is read back only as run
    /// directories under the cgroup mount: a damaged or planted record
    /// cannot make the next run's reaper remove anything else.
    #[test]
    fn a_record_names_only_run_cgroups() {
        let l = Leftover::new(
            vec!["/sys/fs/cgroup/memory/husk/0123456789ab".into(), "/sys/fs/cgroup/unified/husk/0123456789ab".into()],
            Some("/sys/fs/cgroup/unified/husk/0123456789ab".into()),
            KillMethod::CgroupKill,
        );
        let back = Leftover::from_record(&l.record()).unwrap();
        assert_eq!(back.dirs(), l.dirs());
        let planted = "/etc\n/sys/fs/cgroup/memory\n/sys/fs/cgroup/x/../0123456789ab\nrelative/0123456789ab\n";
        assert_eq!(Leftover::from_record(planted), None);
    }
}
