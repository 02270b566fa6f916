//! Resource limits through cgroups: memory, cpu and pids, with the sandbox
//! born inside its cgroup, killed as a group and accounted in the verdict.
//!
//! The mode is picked once: `CgroupPlan::build` turns the host layout
//! (`probe::CgroupHost`) and the requested limits into a `Placement`, and
//! `CgroupPlan::create` makes the one `Cgroup` implementation that serves
//! it (`v2` on unified hosts, `v1` on legacy and hybrid ones). Nothing
//! outside this module asks which cgroup version the host runs.
//!
//! husk only ever creates directories named after a run id under its own
//! parent (`<hierarchy>/husk/` by default, `--cgroup-parent` otherwise), and
//! only ever removes those. It writes `cgroup.subtree_control` of the
//! parents it needs (enabling, never disabling) and nothing else outside.
//!
//! The cgroups-rs crate is not used: its v2 code writes hard-coded
//! /sys/fs/cgroup paths and ignores errors when enabling controllers
//! (against fail-closed), its v1 code creates a group in every mounted
//! hierarchy, and it has neither a hybrid mode (limits in v1, membership and
//! kill in the unified tree) nor CLONE_INTO_CGROUP.

pub mod devices;
pub mod freeze;
mod fs;
pub mod gc;
mod hooks;
pub mod leftover;
pub mod limits;
pub mod nested;
pub mod probe;
pub mod reclaim;
pub mod report;
mod stats;
mod v1;
mod v2;

pub use hooks::{CgroupJoin, GroupKill};
pub use leftover::Leftover;
pub use limits::{Limits, Source, Swap};
pub use probe::{CgroupHost, CgroupMode, Controller};
pub use report::{Adaptation, Adapted, AppliedLimits, CgroupReport, LimitsReport, Usage, explain};

use crate::sys::Errno;
use nix::unistd::Pid;
use std::cell::Cell;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// One hierarchy's directory of a cgroup, as a long-lived sandbox's state
/// records it (`nested::Tree`).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Dir {
    pub path: PathBuf,
    /// The unified hierarchy (cgroup2): membership by CLONE_INTO_CGROUP,
    /// kill by cgroup.kill. Otherwise a v1 hierarchy, joined by self-attach.
    pub unified: bool,
    /// v1: the controllers husk uses in this hierarchy.
    pub controllers: Vec<String>,
}

/// husk's parent cgroup under each hierarchy (or delegated subtree).
pub const DEFAULT_PARENT: &str = "husk";

const FIX_ROOTLESS: &str = "run husk inside a delegated cgroup (e.g. `systemd-run --user --scope -p Delegate=yes husk run ...`), run it as root, or pass --no-cgroup to run without resource limits";

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("invalid {flag} {value}: {why}")]
    BadLimit { flag: &'static str, value: String, why: String },
    #[error(
        "no cgroup filesystem is mounted, so no resource limit can be enforced; mount cgroup2 at /sys/fs/cgroup (`mount -t cgroup2 none /sys/fs/cgroup`), or pass --no-cgroup to run without limits"
    )]
    NotMounted,
    #[error("the {controller} controller, needed for {needed_for}, is not available {place}; fix: {fix}")]
    MissingController { controller: &'static str, needed_for: &'static str, place: String, fix: String },
    #[error(
        "rootless husk found no cgroup delegated to uid {uid} ({detail}), so it cannot enforce {needed_for}; fix: {FIX_ROOTLESS}"
    )]
    NoDelegation { uid: u32, detail: String, needed_for: &'static str },
    #[error(
        "invalid --cgroup-parent {0:?}: give a path below the cgroup mount without '..', e.g. husk or mygroup/husk"
    )]
    BadParent(String),
    #[error(
        "swap cannot be limited here ({file} is missing) and the host has swap active, so --memory would not stop a run from swapping; fix: boot with swapaccount=1 (cgroup v1) or a kernel with CONFIG_MEMCG_SWAP, give --memory-swap unlimited to allow swap, or turn swap off"
    )]
    SwapUncontrolled { file: &'static str },
    #[error("{op} {}{}: {errno:?} ({}){}", path.display(), value.as_deref().map(|v| format!(" (value {v:?})")).unwrap_or_default(), errno.desc(), io_hint(path, *errno))]
    Io { op: &'static str, path: PathBuf, value: Option<String>, errno: Errno },
}

fn io_hint(path: &Path, errno: Errno) -> String {
    let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
    match errno {
        Errno::EACCES | Errno::EPERM => {
            "; husk needs root or a delegated cgroup to write there (or pass --no-cgroup)".into()
        }
        Errno::EROFS => "; the cgroup filesystem is read-only (inside a container?); pass --no-cgroup".into(),
        Errno::EBUSY if file == "cgroup.subtree_control" => "; that cgroup holds processes and cgroup v2 cannot enable controllers in it (no internal processes); use a --cgroup-parent without processes".into(),
        Errno::ENOENT if file.contains('.') => "; the controller is not enabled for this cgroup or the kernel lacks the file".into(),
        _ => String::new(),
    }
}

impl CgroupError {
    /// The errno for the verdict's `error.errno`, when a syscall failed.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            CgroupError::Io { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// How a sandbox's processes are killed as a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillMethod {
    /// Write 1 to cgroup.kill (v2, Linux 5.14+): one atomic kill.
    CgroupKill,
    /// Freeze, SIGKILL every member, thaw (v2 cgroup.freeze or v1 freezer).
    Freeze,
    /// SIGKILL every member listed, repeatedly (no freezer available).
    Signal,
}

impl KillMethod {
    pub fn name(self) -> &'static str {
        match self {
            KillMethod::CgroupKill => "cgroup.kill",
            KillMethod::Freeze => "freeze+sigkill",
            KillMethod::Signal => "sigkill",
        }
    }
}

/// Where the sandbox's cgroup goes, decided once at plan time.
#[derive(Clone, Debug)]
pub enum Placement {
    Unified(v2::Site),
    Legacy(v1::Site),
}

impl Placement {
    /// How the whole sandbox is killed at once (each site chose it).
    pub fn kill(&self) -> KillMethod {
        match self {
            Placement::Unified(site) => site.kill,
            Placement::Legacy(site) => site.kill,
        }
    }
}

/// The cgroup part of a plan.
#[derive(Clone, Debug)]
pub enum CgroupPlan {
    /// `--no-cgroup`: no limits, and the verdict says `limits: "none"`.
    Disabled,
    Enforced {
        limits: Limits,
        placement: Placement,
        /// Set by a backend that bounds the workload partly outside the
        /// cgroup (`adapt`); the verdict reports it.
        adaptation: Option<Box<Adaptation>>,
    },
}

/// Who asks: decides between husk's own parent at the hierarchy root (root)
/// and a delegated subtree (rootless).
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub uid: u32,
    pub privileged: bool,
}

impl CgroupPlan {
    pub fn build(spec: &crate::spec::LimitSpec, host: &CgroupHost, who: Caller) -> Result<CgroupPlan, CgroupError> {
        if spec.no_cgroup {
            return Ok(CgroupPlan::Disabled);
        }
        let limits = Limits::resolve(spec, limits::HostSize::probe())?;
        let parent = spec.cgroup_parent.as_deref().map(parse_parent).transpose()?;
        let placement = match host.mode {
            CgroupMode::Unified => Placement::Unified(v2::Site::choose(host, &limits, parent.as_deref(), who)?),
            CgroupMode::Hybrid | CgroupMode::Legacy => {
                Placement::Legacy(v1::Site::choose(host, &limits, parent.as_deref(), who)?)
            }
            CgroupMode::Absent => return Err(CgroupError::NotMounted),
        };
        Ok(CgroupPlan::Enforced { limits, placement, adaptation: None })
    }

    /// Creates the sandbox's cgroup and applies every limit; `None` when
    /// cgroups are disabled. On error nothing is left behind.
    pub fn create(&self, id: &str) -> Result<Option<SandboxCgroup>, CgroupError> {
        self.begin(id)?.map(PendingCgroup::complete).transpose()
    }

    /// Only what the sandbox must be cloned into (the v2 directory; on
    /// hybrid hosts the unified one): `PendingCgroup::complete` adds the
    /// rest while the sandbox runs its setup. `None` when cgroups are
    /// disabled. Dropping the result removes what it made.
    pub fn begin(&self, id: &str) -> Result<Option<PendingCgroup>, CgroupError> {
        let CgroupPlan::Enforced { limits, placement, adaptation } = self else {
            return Ok(None);
        };
        let clone_dir = match placement {
            Placement::Unified(site) => Some(v2::V2Cgroup::clone_dir(site, id)?),
            Placement::Legacy(site) => v1::V1Cgroup::clone_dir(site, id)?,
        };
        Ok(Some(PendingCgroup {
            id: id.to_string(),
            limits: *limits,
            adaptation: adaptation.as_deref().cloned(),
            placement: placement.clone(),
            clone_dir,
        }))
    }

    /// Lets a backend change the limits the cgroup gets and say how it
    /// applies what the user asked (see `Adaptation`); `f` gets the
    /// resolved limits. Nothing to adapt without a cgroup.
    pub fn adapt<E>(&mut self, f: impl FnOnce(&mut Limits) -> Result<Adaptation, E>) -> Result<(), E> {
        if let CgroupPlan::Enforced { limits, adaptation, .. } = self {
            *adaptation = Some(Box::new(f(limits)?));
        }
        Ok(())
    }

    /// The adaptation a backend made (`adapt`), if any.
    pub fn adaptation(&self) -> Option<&Adaptation> {
        match self {
            CgroupPlan::Enforced { adaptation, .. } => adaptation.as_deref(),
            CgroupPlan::Disabled => None,
        }
    }

    /// What the verdict's `isolation.downgrades` lists for this plan.
    pub fn downgrades(&self) -> Vec<&'static str> {
        match self {
            CgroupPlan::Disabled => vec!["no_cgroup"],
            CgroupPlan::Enforced { .. } => Vec::new(),
        }
    }
}

/// A run's cgroup in the making (`CgroupPlan::begin`). As a `CgroupJoin`
/// it is deferred: the child, born in `clone_dir`, waits before it runs
/// anything of the sandbox until the parent has `complete`d it and sent
/// `Msg::CgroupReady` with the v1 `tasks` files to join.
pub struct PendingCgroup {
    id: String,
    limits: Limits,
    adaptation: Option<Adaptation>,
    placement: Placement,
    clone_dir: Option<(PathBuf, OwnedFd)>,
}

impl PendingCgroup {
    /// The v1 directories and every limit; on error nothing is left (a
    /// sandbox already inside is killed by the removal).
    pub fn complete(mut self) -> Result<SandboxCgroup, CgroupError> {
        let made = self.clone_dir.take();
        let (cg, mut applied): (Box<dyn Cgroup>, LimitsReport) = match (&self.placement, made) {
            (Placement::Unified(site), Some(dir)) => {
                let (cg, r) = v2::V2Cgroup::create(site, &self.limits, dir)?;
                (Box::new(cg), r)
            }
            (Placement::Unified(_), None) => unreachable!("begin makes the v2 directory"),
            (Placement::Legacy(site), made) => {
                let (cg, r) = v1::V1Cgroup::create(site, &self.id, &self.limits, made)?;
                (Box::new(cg), r)
            }
        };
        if let Some(a) = &self.adaptation {
            a.annotate(&mut applied);
        }
        Ok(SandboxCgroup { cg, limits: applied, group_killed: Cell::new(false) })
    }
}

impl Drop for PendingCgroup {
    fn drop(&mut self) {
        if let Some((dir, _)) = self.clone_dir.take() {
            let kill = self.placement.kill();
            let _ = fs::rmdir(
                &dir,
                &|| {
                    let _ = v2::kill(&dir, kill);
                },
                v2::PATIENCE,
            );
        }
    }
}

impl CgroupJoin for PendingCgroup {
    fn clone_into(&self) -> Option<BorrowedFd<'_>> {
        self.clone_dir.as_ref().map(|(_, fd)| fd.as_fd())
    }

    fn join_self(&self) -> Result<(), Errno> {
        Ok(())
    }

    fn attach(&self, pid: Pid, born_inside: bool) -> Result<(), CgroupError> {
        match &self.clone_dir {
            Some((d, _)) => v2::attach(d, pid, born_inside),
            None => Ok(()),
        }
    }

    fn deferred(&self) -> bool {
        true
    }
}

/// For `husk doctor`: whether husk's default limits can be enforced here
/// (`ok`, what was found, and the fix when not).
pub fn doctor(host: &CgroupHost, who: Caller) -> (bool, String, Option<String>) {
    let plan = CgroupPlan::build(&crate::spec::LimitSpec::default(), host, who);
    let mut detail = format!("mode {}", host.mode.name());
    if let Ok(CgroupPlan::Enforced { placement, .. }) = &plan {
        let parent = match placement {
            Placement::Unified(s) => s.parent.display().to_string(),
            Placement::Legacy(s) => s
                .nodes
                .iter()
                .map(|n| n.parent.display().to_string())
                .chain(s.unified.iter().map(|u| u.display().to_string()))
                .collect::<Vec<_>>()
                .join(", "),
        };
        detail.push_str(&format!("; runs go under {parent}; group kill by {}", placement.kill().name()));
    }
    match plan {
        Ok(_) => (true, detail, None),
        Err(e) => (false, detail, Some(e.to_string())),
    }
}

/// `--cgroup-parent`: a relative path below the mount (or delegated root).
pub(crate) fn parse_parent(p: &str) -> Result<PathBuf, CgroupError> {
    let rel = p.trim_matches('/');
    if rel.is_empty() || rel.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(CgroupError::BadParent(p.into()));
    }
    Ok(PathBuf::from(rel))
}

/// Where husk's parent goes in one hierarchy: `(anchor, parent)`, where the
/// anchor is the highest directory husk may write (enable controllers in)
/// and `parent` the directory the run's leaf is created in.
fn parent_in(
    mount: &probe::Mount,
    custom: Option<&Path>,
    who: Caller,
    needed_for: &'static str,
) -> Result<(PathBuf, PathBuf), CgroupError> {
    if let Some(rel) = custom {
        return Ok((mount.path.clone(), mount.path.join(rel)));
    }
    if who.privileged {
        return Ok((mount.path.clone(), mount.path.join(DEFAULT_PARENT)));
    }
    let own = mount.own_dir().ok_or_else(|| CgroupError::NoDelegation {
        uid: who.uid,
        detail: format!("husk's own cgroup is not visible under {}", mount.path.display()),
        needed_for,
    })?;
    let root = probe::delegated_root(&mount.path, &own, who.uid).ok_or_else(|| CgroupError::NoDelegation {
        uid: who.uid,
        detail: format!("husk runs in {}, which it may not manage", own.display()),
        needed_for,
    })?;
    let parent = root.join(DEFAULT_PARENT);
    Ok((root, parent))
}

/// What a limit is needed for, for messages.
fn purpose(c: Controller) -> &'static str {
    match c {
        Controller::Memory => "--memory",
        Controller::Cpu => "--cpus",
        Controller::Pids => "--pids",
        Controller::Cpuacct => "cpu accounting",
        Controller::Freezer => "group kill",
    }
}

/// One implementation per host mode, chosen by `CgroupPlan::create`.
/// Limits are applied by the constructors; dropping an implementation
/// removes what it created.
trait Cgroup {
    fn clone_into(&self) -> Option<BorrowedFd<'_>>;
    /// In the child right after clone (no allocation): joins the
    /// hierarchies it could not be born in by moving itself.
    fn join_self(&self) -> Result<(), Errno>;
    /// In the parent before release: joins `pid` where it is not yet.
    fn attach(&self, pid: Pid, born_inside: bool) -> Result<(), CgroupError>;
    fn kill_all(&self) -> Result<(), CgroupError>;
    /// The `tasks` files a deferred child writes "0" to (v1).
    fn join_files(&self) -> &[OwnedFd];
    fn usage(&self) -> Usage;
    fn remove(&mut self) -> Result<(), CgroupError>;
    /// Closes every file of the cgroup and gives up its removal, which
    /// the returned `Leftover` does later.
    fn disown(&mut self) -> Leftover;
    /// Its directories, for a long-lived sandbox's state (`nested::Tree`).
    fn dirs(&self) -> Vec<Dir>;
}

/// A run's live cgroup: the join hook for spawn, the group kill for the
/// supervisor, the accounting for the verdict, and (on drop, on every path)
/// its removal.
pub struct SandboxCgroup {
    cg: Box<dyn Cgroup>,
    limits: LimitsReport,
    group_killed: Cell<bool>,
}

impl SandboxCgroup {
    /// Reads the accounting, removes the cgroup and reports both.
    pub fn finish(mut self) -> CgroupReport {
        let mut usage = self.cg.usage();
        usage.group_killed = self.group_killed.get();
        let cleanup = self.cg.remove().err().map(|e| e.to_string());
        CgroupReport { limits: std::mem::take(&mut self.limits), usage, cleanup }
    }

    /// Reads the accounting now and leaves the removal to the returned
    /// `Leftover` (`backend::native::teardown`): the report's `cleanup` is
    /// for whoever removes it to fill in.
    pub fn read_and_leave(mut self) -> (CgroupReport, Leftover) {
        let mut usage = self.cg.usage();
        usage.group_killed = self.group_killed.get();
        let leftover = self.cg.disown();
        (CgroupReport { limits: std::mem::take(&mut self.limits), usage, cleanup: None }, leftover)
    }

    pub fn limits(&self) -> &LimitsReport {
        &self.limits
    }

    /// The files a deferred child joins through (`Msg::CgroupReady`).
    pub fn join_files(&self) -> Vec<BorrowedFd<'_>> {
        self.cg.join_files().iter().map(|f| f.as_fd()).collect()
    }
}

impl CgroupJoin for SandboxCgroup {
    fn clone_into(&self) -> Option<BorrowedFd<'_>> {
        self.cg.clone_into()
    }

    fn join_self(&self) -> Result<(), Errno> {
        self.cg.join_self()
    }

    fn attach(&self, pid: Pid, born_inside: bool) -> Result<(), CgroupError> {
        self.cg.attach(pid, born_inside)
    }
}

impl GroupKill for SandboxCgroup {
    /// `group_killed` says the cgroup kill worked, not that it was tried
    /// (the pid namespace's end would kill everything anyway).
    fn kill_all(&self) {
        match self.cg.kill_all() {
            Ok(()) => self.group_killed.set(true),
            Err(e) => crate::errln!("husk: warning: group kill failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_parent_must_stay_below_the_mount() {
        assert_eq!(parse_parent("/mygroup/husk/").unwrap(), PathBuf::from("mygroup/husk"));
        assert!(parse_parent("../etc").is_err());
        assert!(parse_parent("a//b").is_err());
        assert!(parse_parent("/").is_err());
    }

    #[test]
    fn rootless_without_delegation_is_refused_with_the_fix() {
        let mi = "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let mut host = CgroupHost::from_texts(mi, "0::/\n", true);
        host.unified.as_mut().unwrap().controllers = vec![Controller::Memory, Controller::Pids];
        // A uid that owns nothing under /sys/fs/cgroup.
        let who = Caller { uid: 4_000_000_000, privileged: false };
        let e = CgroupPlan::build(&Default::default(), &host, who).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, CgroupError::NoDelegation { .. }), "{msg}");
        assert!(msg.contains("--no-cgroup") && msg.contains("Delegate=yes"), "{msg}");
        let off = crate::spec::LimitSpec { no_cgroup: true, ..Default::default() };
        assert!(matches!(CgroupPlan::build(&off, &host, who).unwrap(), CgroupPlan::Disabled));
    }

    #[test]
    fn no_cgroupfs_fails_closed() {
        let host = CgroupHost::from_texts("", "", false);
        let who = Caller { uid: 0, privileged: true };
        assert!(matches!(CgroupPlan::build(&Default::default(), &host, who), Err(CgroupError::NotMounted)));
    }
}
