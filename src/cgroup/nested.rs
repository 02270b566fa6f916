//! The cgroups of a long-lived sandbox (`husk create`). The sandbox's own
//! cgroup carries the limits (made like a run's, by `CgroupPlan::create`);
//! its processes live in leaves below it: `init` for the sandbox init and
//! `exec-<id>` for each `husk exec`, so every exec has its own accounting
//! and its own kill while all of them share the sandbox's limits. cgroup v2
//! admits processes only in leaves once controllers are enabled for
//! children ("no internal processes"), hence the init's own leaf.
//!
//! The layout is data (`Tree`), kept in the sandbox's state: `husk exec`
//! and `husk gc` are other processes than the one that made it.

use super::fs;
use super::probe::Controller;
use super::report::Usage;
use super::stats::Stats;
use super::v2::PATIENCE;
use super::{CgroupError, CgroupJoin, Dir, GroupKill, KillMethod, SandboxCgroup};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Prefix of a sandbox's cgroup under husk's parents (run cgroups are bare
/// ids; `cgroup::gc` leaves these to the sandbox gc).
pub const SANDBOX_PREFIX: &str = "sbx-";

/// A sandbox's cgroup layout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    /// `v2`, `hybrid` or `v1`.
    pub mode: String,
    /// `cgroup.kill`, `freeze+sigkill` or `sigkill`.
    pub kill: String,
    pub dirs: Vec<Dir>,
}

impl KillMethod {
    pub fn from_name(name: &str) -> KillMethod {
        match name {
            "cgroup.kill" => KillMethod::CgroupKill,
            "freeze+sigkill" => KillMethod::Freeze,
            _ => KillMethod::Signal,
        }
    }
}

impl SandboxCgroup {
    /// The layout of this cgroup, for a sandbox's state.
    pub fn tree(&self) -> Tree {
        let info = &self.limits.cgroup;
        Tree { mode: info.mode.to_string(), kill: info.kill.to_string(), dirs: self.cg.dirs() }
    }
}

impl Tree {
    fn kill_method(&self) -> KillMethod {
        KillMethod::from_name(&self.kill)
    }

    fn unified(&self) -> Option<&Path> {
        self.dirs.iter().find(|d| d.unified).map(|d| d.path.as_path())
    }

    /// Before any process is in the sandbox's cgroup: hands the unified
    /// controllers it has (memory, pids, cpu on v2) to its leaves, for
    /// their accounting. Nothing to do on v1 hierarchies.
    pub fn prepare(&self) -> Result<(), CgroupError> {
        let Some(d) = self.unified().filter(|_| self.mode == "v2") else { return Ok(()) };
        let have = fs::read(d, "cgroup.controllers")?;
        let ctrls: Vec<super::Controller> = have
            .split_whitespace()
            .filter_map(super::Controller::from_name)
            .filter(|c| matches!(c, super::Controller::Memory | super::Controller::Pids | super::Controller::Cpu))
            .collect();
        super::v2::enable(d, &ctrls)
    }

    /// Creates the leaf `name` in every hierarchy and opens what joining it
    /// and reading its counters need. On error nothing is left behind.
    pub fn leaf(&self, name: &str) -> Result<Leaf, CgroupError> {
        self.make_leaf(name)?;
        self.open_leaf(name).inspect_err(|_| {
            self.remove_leaf(name);
        })
    }

    /// Creates the leaf `name` in every hierarchy (the supervisor makes each
    /// exec's ahead of time, off the exec's path).
    pub fn make_leaf(&self, name: &str) -> Result<(), CgroupError> {
        for (i, d) in self.dirs.iter().enumerate() {
            if let Err(e) = fs::mkdir_new(&d.path.join(name)) {
                for made in &self.dirs[..i] {
                    let _ = std::fs::remove_dir(made.path.join(name));
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Opens an existing leaf for joining and accounting.
    pub fn open_leaf(&self, name: &str) -> Result<Leaf, CgroupError> {
        let mut leaf = Leaf {
            dirs: Vec::new(),
            unified: None,
            tasks: Vec::new(),
            stats: Stats::default(),
            kill: self.kill_method(),
            killed: Cell::new(false),
        };
        for d in &self.dirs {
            let dir = d.path.join(name);
            if d.unified {
                leaf.unified = Some((dir.clone(), fs::open_dir(&dir)?));
            } else {
                leaf.tasks.push(fs::open_write(&dir, "tasks")?);
            }
            leaf.open_stats(d, &dir, self.mode == "v1");
            leaf.dirs.push((dir, d.controllers.clone()));
        }
        Ok(leaf)
    }

    /// Removes the leaf `name` where it is empty; a leaf still holding
    /// processes (an exec's background server) stays until the sandbox goes.
    /// True when it is gone everywhere.
    pub fn remove_leaf(&self, name: &str) -> bool {
        let mut gone = true;
        for d in self.dirs.iter().rev() {
            match std::fs::remove_dir(d.path.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => gone = false,
            }
        }
        gone
    }

    /// Kills every process in the sandbox's cgroups, leaves included.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        if let Some(d) = self.unified() {
            // cgroup.kill (and the freezer) of a cgroup takes its subtree.
            return super::v2::kill(d, self.kill_method());
        }
        let Some(first) = self.dirs.first() else { return Ok(()) };
        for dir in std::iter::once(first.path.clone()).chain(subdirs(&first.path)) {
            fs::kill_listed(&dir)?;
        }
        Ok(())
    }

    /// Kills what is left and removes every directory, leaves first.
    pub fn remove(&self) -> Result<(), CgroupError> {
        let kill = || {
            let _ = self.kill_all();
        };
        let mut first_err = None;
        for d in &self.dirs {
            if let Err(e) = fs::rmdir(&d.path, &kill, PATIENCE) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Incidents in a whole sandbox so far (`Tree::incidents`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Incidents {
    /// Processes the kernel OOM-killed.
    pub oom_kills: u64,
    /// Forks refused at the pids limit.
    pub pids_limit_hits: u64,
}

impl Tree {
    /// The sandbox's incident counters, summed over its leaves where the
    /// kernel keeps them per leaf. cgroup v2 counts an OOM kill and a
    /// refused fork at the cgroup whose limit was hit and every ancestor,
    /// so the sandbox's own `memory.events` / `pids.events` hold every
    /// leaf's. v1 counts them only where the victim or the forking task
    /// lives (an exec's leaf, the init's), so they are summed over the
    /// sandbox's cgroup and its leaves: a leaf removed since takes its
    /// counts with it (the supervisor samples before removing one).
    pub fn incidents(&self) -> Incidents {
        let mut n = Incidents::default();
        let v2 = self.mode == "v2";
        for d in &self.dirs {
            let (oom, events): (Option<(&str, &str)>, bool) = match (v2, d.unified) {
                (true, true) => (Some(("memory.events", "oom_kill")), true),
                (false, false) => {
                    let has = |c: &str| d.controllers.iter().any(|x| x == c);
                    (has("memory").then_some(("memory.oom_control", "oom_kill")), has("pids"))
                }
                _ => continue,
            };
            let dirs = if v2 { vec![d.path.clone()] } else { [vec![d.path.clone()], subdirs(&d.path)].concat() };
            for dir in dirs {
                if let Some((file, key)) = oom {
                    n.oom_kills += fs::read_opt(&dir, file).and_then(|t| fs::keyed(&t, key)).unwrap_or(0);
                }
                if events {
                    n.pids_limit_hits +=
                        fs::read_opt(&dir, "pids.events").and_then(|t| fs::keyed(&t, "max")).unwrap_or(0);
                }
            }
        }
        n
    }
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|it| it.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// One leaf: the sandbox init's or an exec's.
pub struct Leaf {
    /// Each hierarchy's leaf directory and the controllers husk uses there.
    dirs: Vec<(PathBuf, Vec<String>)>,
    unified: Option<(PathBuf, OwnedFd)>,
    /// Each v1 hierarchy's `tasks` file, open for `join_self`.
    tasks: Vec<OwnedFd>,
    stats: Stats,
    kill: KillMethod,
    killed: Cell<bool>,
}

impl Leaf {
    fn open_stats(&mut self, d: &Dir, dir: &Path, pure_v1: bool) {
        let s = &mut self.stats;
        if d.unified {
            for (stat, file) in super::v2::STATS {
                s.open(stat, dir, file);
            }
            return;
        }
        for c in d.controllers.iter().filter_map(|c| Controller::from_name(c)) {
            for &(stat, file) in super::v1::stat_files(c, false, !pure_v1) {
                s.open(stat, dir, file);
            }
        }
    }

    pub fn paths(&self) -> Vec<String> {
        self.dirs.iter().map(|(d, _)| d.display().to_string()).collect()
    }

    /// The leaf's counters so far.
    pub fn usage(&self) -> Usage {
        let mut u = self.stats.usage();
        u.group_killed = self.killed.get();
        u
    }
}

impl CgroupJoin for Leaf {
    fn clone_into(&self) -> Option<BorrowedFd<'_>> {
        self.unified.as_ref().map(|(_, fd)| fd.as_fd())
    }

    /// v1 hierarchies cannot be cloned into: the child writes "0" (itself)
    /// to each `tasks` file, first thing after clone (see `v1::join_self`).
    fn join_self(&self) -> Result<(), nix::errno::Errno> {
        super::v1::join_self(&self.tasks)
    }

    fn attach(&self, pid: Pid, born_inside: bool) -> Result<(), CgroupError> {
        match &self.unified {
            Some((d, _)) => super::v2::attach(d, pid, born_inside),
            None => Ok(()),
        }
    }
}

impl Leaf {
    /// Moves a running process that is not husk's child into this leaf, in
    /// every hierarchy (a child of husk's joins the v1 ones itself,
    /// `join_self`): a warm interpreter's fresh child, placed before it
    /// may run anything of its call (docs/warm.md). Its charges made so
    /// far stay where they were (v1 memory does not move them); what it
    /// allocates from now on is this leaf's.
    pub fn adopt(&self, pid: Pid) -> Result<(), CgroupError> {
        if let Some((d, _)) = &self.unified {
            super::v2::attach(d, pid, false)?;
        }
        for (dir, _) in self.dirs.iter().filter(|(d, _)| self.unified.as_ref().is_none_or(|(u, _)| u != d)) {
            fs::write(dir, "cgroup.procs", &pid.as_raw().to_string())?;
        }
        Ok(())
    }
}

impl Leaf {
    /// Whether `pid` is in this leaf in every hierarchy (the supervisor
    /// placed a warm interpreter's spare child here ahead of the call).
    pub fn holds(&self, pid: Pid) -> bool {
        let want = pid.as_raw();
        !self.dirs.is_empty()
            && self
                .dirs
                .iter()
                .all(|(d, _)| fs::read_opt(d, "cgroup.procs").is_some_and(|t| fs::pids(&t).contains(&want)))
    }
}

impl Leaf {
    /// The processes in this leaf (every hierarchy holds the same ones, so
    /// the first says). A warm call's exec kills what its call left only
    /// when there is something (docs/warm.md).
    pub fn members(&self) -> Vec<i32> {
        self.dirs.first().and_then(|(d, _)| fs::read_opt(d, "cgroup.procs")).map(|t| fs::pids(&t)).unwrap_or_default()
    }
}

impl GroupKill for Leaf {
    fn kill_all(&self) {
        self.killed.set(true);
        let freezer = self.dirs.iter().find(|(_, cs)| cs.iter().any(|c| c == "freezer"));
        let r = match (&self.unified, self.kill, freezer) {
            (Some((d, _)), method, _) => super::v2::kill(d, method),
            (None, KillMethod::Freeze, Some((d, _))) => super::v1::freezer_kill(d),
            (None, _, _) => self.dirs.first().map_or(Ok(()), |(d, _)| fs::kill_listed(d)),
        };
        if let Err(e) = r {
            crate::errln!("husk: warning: killing the exec's cgroup: {e}");
        }
    }
}

/// A sandbox cgroup `husk gc` found under husk's parents: `(path, id)`.
pub fn sandbox_dirs(parents: &[PathBuf]) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for parent in parents {
        let Ok(entries) = std::fs::read_dir(parent) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_prefix(SANDBOX_PREFIX).filter(|id| super::gc::is_run_id(id))
                && e.file_type().is_ok_and(|t| t.is_dir())
            {
                out.push((e.path(), id.to_string()));
            }
        }
    }
    out
}

/// Whether a cgroup or any cgroup below it holds a process.
pub fn populated(dir: &Path) -> bool {
    let own = fs::read_opt(dir, "cgroup.procs").is_some_and(|t| !fs::pids(&t).is_empty());
    own || subdirs(dir).iter().any(|d| populated(d))
}

/// Removes an empty sandbox cgroup, its leaves first.
pub fn remove_empty(dir: &Path) -> Result<(), CgroupError> {
    fs::rmdir(dir, &|| {}, PATIENCE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_round_trip_through_json() {
        let t = Tree {
            mode: "hybrid".into(),
            kill: "cgroup.kill".into(),
            dirs: vec![
                Dir {
                    path: "/sys/fs/cgroup/memory/husk/sbx-0123456789ab".into(),
                    unified: false,
                    controllers: vec!["memory".into()],
                },
                Dir { path: "/sys/fs/cgroup/unified/husk/sbx-0123456789ab".into(), unified: true, controllers: vec![] },
            ],
        };
        let back: Tree = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.kill_method(), KillMethod::CgroupKill);
        assert_eq!(back.unified(), Some(Path::new("/sys/fs/cgroup/unified/husk/sbx-0123456789ab")));
    }

    #[test]
    fn only_sandbox_cgroups_are_found() {
        let t = std::env::temp_dir().join(format!("husk-nested-{}", std::process::id()));
        for d in ["sbx-0123456789ab", "0123456789ab", "sbx-nothex", "other"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        let found = sandbox_dirs(std::slice::from_ref(&t));
        assert_eq!(found, vec![(t.join("sbx-0123456789ab"), "0123456789ab".to_string())]);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
