//! Starting runsc: a child in a private mount namespace (and, rootless, a
//! user namespace where it is root) builds the plan's root in its staging
//! area, mounts the trees runsc serves as OCI binds next to it, and execs
//! `runsc run`. runsc, its gofer and its sandbox inherit that namespace;
//! when the last of them exits it is gone, so nothing is ever mounted in
//! the host's namespace and nothing needs unmounting.
//!
//! husk itself never changes namespaces: it keeps writing verdict files and
//! running `runsc kill` where the caller expects.

use super::layout::{Layout, Role};
use crate::cgroup::CgroupJoin;
use crate::outcome::ErrorReport;
use crate::plan::Plan;
use crate::rootfs::mount::{Assembled, create_entry, prepare, seal_root, stage};
use crate::rootfs::{Entry, Source};
use crate::spawn::{ChildStdio, now_ns, phase};
use crate::step::{AtStep, Phase, Step, StepError};
use crate::sync::{Channel, MAX_TIMES, Msg};
use crate::sys::Errno;
use crate::sys::fd::{CStrArray, CloseRange, close_from, dup_onto};
use crate::sys::mount::{FsContext, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, move_mount_to_path};
use crate::sys::process::{
    Forked, SingleThreaded, ThreadsError, clone3, execve, exit_now, pidfd_send_signal, wait_pidfd,
};
use nix::fcntl::AT_FDCWD;
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal};
use nix::unistd::Pid;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("creating runsc's mount namespace (clone3 with {flags}): {errno}")]
    Clone { flags: &'static str, errno: Errno },
    #[error("sync channel: {0}")]
    Channel(Errno),
    #[error("writing {file} for pid {pid}: {source}")]
    IdMap { file: &'static str, pid: i32, source: std::io::Error },
    #[error("attaching runsc to the run's cgroup: {0}")]
    Cgroup(crate::cgroup::CgroupError),
    #[error("before creating runsc's process: {0}")]
    Threads(#[from] ThreadsError),
}

impl LaunchError {
    pub fn step(&self) -> Phase {
        match self {
            LaunchError::Clone { .. } | LaunchError::Threads(_) => Phase::Clone,
            LaunchError::Channel(_) => Phase::SyncChannel,
            LaunchError::IdMap { .. } => Phase::WriteIdMaps,
            LaunchError::Cgroup(_) => Phase::Step(Step::JoinCgroup),
        }
    }

    pub fn errno(&self) -> Option<Errno> {
        match self {
            LaunchError::Clone { errno, .. } | LaunchError::Channel(errno) => Some(*errno),
            LaunchError::IdMap { source, .. } => crate::step::io_errno(source),
            LaunchError::Cgroup(e) => e.errno(),
            LaunchError::Threads(e) => e.errno(),
        }
    }
}

impl From<LaunchError> for ErrorReport {
    fn from(e: LaunchError) -> ErrorReport {
        ErrorReport::new(e.step(), e.to_string()).with_errno(e.errno())
    }
}

/// Everything the child needs, built before clone.
pub struct Launch<'a> {
    pub plan: &'a Plan,
    pub layout: &'a Layout,
    pub bin: CString,
    pub argv: CStrArray,
    pub envp: CStrArray,
    pub stdio: ChildStdio,
    /// A user namespace for runsc and everything it starts.
    pub user_ns: Option<UserNs>,
    /// Host directories runsc must reach, re-attached in its namespace.
    pub expose: Expose,
}

/// The maps of runsc's user namespace: the sandbox's id range, as the
/// native backend maps it (so sandbox root is never host root, not even
/// for the files runsc's gofer creates on a writable bind), or the
/// invoking user alone when husk is not root.
pub struct UserNs {
    pub uid_map: String,
    pub gid_map: String,
    pub deny_setgroups: bool,
}

/// Host directories runsc must reach (its `--root`, the run's bundle
/// directory, its own binary's directory): cloned by the parent, which can
/// reach them, and attached by the child at their own paths on a tmpfs
/// that covers `cover` (husk's state dir) in the child's namespace only.
/// runsc runs as the sandbox's mapped root, which may not traverse husk's
/// private state dir, and the staging tmpfs may cover any of them.
pub struct Expose {
    pub cover: PathBuf,
    /// Cloned by the parent when it can (as host root), else by the child
    /// (rootless: only inside its own user namespace may it clone mounts).
    pub trees: Vec<Source>,
}

impl Expose {
    pub fn new(cover: PathBuf, paths: &[PathBuf]) -> Expose {
        Expose { cover, trees: paths.iter().map(|p| Source::new(&p.to_string_lossy(), true)).collect() }
    }

    /// Clones every tree now (as the caller).
    pub fn open(&self) -> Result<(), (PathBuf, Errno)> {
        for t in &self.trees {
            t.open().map_err(|e| (path_of(t), e))?;
        }
        Ok(())
    }
}

fn path_of(s: &Source) -> PathBuf {
    PathBuf::from(std::ffi::OsStr::from_bytes(s.path.as_bytes()))
}

/// A started runsc.
pub struct Launched {
    pub pid: Pid,
    pub pidfd: OwnedFd,
    pub chan: Channel,
    /// Monotonic ns just before clone.
    pub t_clone: u64,
}

/// Clones runsc's child and releases it once its user namespace (if any)
/// is mapped and it is in the run's cgroup (if any). With a cgroup, runsc,
/// its gofer and its sandbox are all born in it (CLONE_INTO_CGROUP).
pub fn spawn(l: &Launch<'_>, cgroup: Option<&dyn CgroupJoin>) -> Result<Launched, LaunchError> {
    let one = SingleThreaded::check()?;
    let (parent_end, child_end) = Channel::pair().map_err(LaunchError::Channel)?;
    let (flags, names) = match &l.user_ns {
        Some(_) => (libc::CLONE_NEWUSER | libc::CLONE_NEWNS, "user,mount"),
        None => (libc::CLONE_NEWNS, "mount"),
    };
    let t_clone = now_ns();
    match clone3(&one, flags, cgroup.and_then(|c| c.clone_into())) {
        Err(errno) => Err(LaunchError::Clone { flags: names, errno }),
        Ok(Forked::Child(_)) => {
            drop(parent_end);
            // v1 hierarchies cannot be born into: join them first thing.
            if let Some(cg) = cgroup
                && let Err(e) = cg.join_self()
            {
                let _ = child_end.send(Msg::Failed(StepError::new(Step::JoinCgroup, e)));
                exit_now(125);
            }
            child(l, &child_end)
        }
        Ok(Forked::Parent { pid, pidfd }) => {
            drop(child_end);
            let pidfd = pidfd.expect("clone3 returns a pidfd");
            let abort = |e: LaunchError| {
                let _ = pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                let _ = wait_pidfd(pidfd.as_fd());
                e
            };
            if let Some(ns) = &l.user_ns {
                write_maps(pid, ns).map_err(abort)?;
            }
            if let Some(cg) = cgroup
                && let Err(e) = cg.attach(pid, true)
            {
                return Err(abort(LaunchError::Cgroup(e)));
            }
            parent_end.send(Msg::Release).map_err(|e| abort(LaunchError::Channel(e)))?;
            Ok(Launched { pid, pidfd, chan: parent_end, t_clone })
        }
    }
}

/// Writes the child's id maps (setgroups first where an unprivileged
/// writer must deny it).
fn write_maps(pid: Pid, ns: &UserNs) -> Result<(), LaunchError> {
    let write = |file: &'static str, data: String| {
        std::fs::write(format!("/proc/{pid}/{file}"), data).map_err(|source| LaunchError::IdMap {
            file,
            pid: pid.as_raw(),
            source,
        })
    };
    if ns.deny_setgroups {
        write("setgroups", "deny".into())?;
    }
    write("uid_map", ns.uid_map.clone())?;
    write("gid_map", ns.gid_map.clone())
}

fn child(l: &Launch<'_>, chan: &Channel) -> ! {
    let mut times = [0u64; MAX_TIMES];
    times[phase::CHILD_START] = now_ns();
    match setup(l, chan, &mut times) {
        Ok(()) => {
            times[phase::MOUNTS] = now_ns();
            let _ = chan.send(Msg::Times(times));
            let errno = execve(&l.bin, &l.argv, &l.envp);
            let _ = chan.send(Msg::Failed(StepError::new(Step::ExecRunsc, errno)));
            exit_now(125)
        }
        Err(e) => {
            let _ = chan.send(Msg::Failed(e));
            exit_now(125)
        }
    }
}

fn setup(l: &Launch<'_>, chan: &Channel, times: &mut [u64; MAX_TIMES]) -> Result<(), StepError> {
    // runsc dies with husk, and its gofer and sandbox with runsc (it
    // starts them with PDEATHSIG): a SIGKILLed husk leaves nothing behind.
    prctl::set_pdeathsig(Signal::SIGKILL).at(Step::AwaitRelease)?;
    match chan.recv() {
        Ok(Some(Msg::Release)) => {}
        Ok(_) | Err(_) => exit_now(125),
    }
    times[phase::RELEASED] = now_ns();

    // The ids runsc's processes run as; clears the death signal, re-armed.
    if let Some(ns) = &l.user_ns {
        if !ns.deny_setgroups {
            nix::unistd::setgroups(&[]).at(Step::BecomeRoot)?;
        }
        let root = nix::unistd::Gid::from_raw(0);
        nix::unistd::setresgid(root, root, root).at(Step::BecomeRoot)?;
        let root = nix::unistd::Uid::from_raw(0);
        nix::unistd::setresuid(root, root, root).at(Step::BecomeRoot)?;
        prctl::set_pdeathsig(Signal::SIGKILL).at(Step::BecomeRoot)?;
        if chan.peer_gone() {
            exit_now(125);
        }
    }
    // While every host path is still visible (before the staging tmpfs).
    for t in &l.expose.trees {
        t.open().at(Step::OpenSources)?;
    }
    let plan = &l.plan.mounts;
    let roles = &l.layout.roles;
    let a = prepare(plan, |i| roles[i].is_staged())?;
    for (i, (op, role)) in plan.ops.iter().zip(roles).enumerate() {
        if let Role::Staged { name, .. } = role {
            stage(&a, op, name).map_err(|errno| StepError { step: Step::MountFilesystems, errno, detail: i as u32 })?;
        }
    }
    seal_root(plan, &a)?;
    expose(&a, &plan.staging, &l.expose).at(Step::Staging)?;

    for (fd, target) in [(l.stdio.stdout, 1), (l.stdio.stderr, 2)] {
        if let Some(fd) = fd {
            dup_onto(fd, target).at(Step::ExecRunsc)?;
        }
    }
    // Terminal signals go to husk, which forwards them with `runsc kill`
    // (runsc run does not forward them, it dies of them).
    nix::unistd::setsid().at(Step::ExecRunsc)?;
    crate::sys::signal::reset_dispositions().at(Step::ExecRunsc)?;
    crate::sys::signal::set_mask(&SigSet::empty()).at(Step::ExecRunsc)?;
    close_from(3, CloseRange::Cloexec).at(Step::ExecRunsc)?;
    if chan.peer_gone() {
        exit_now(125);
    }
    Ok(())
}

/// Attaches the exposed trees at their own paths: those under the cover
/// on a fresh tmpfs over it, those under the staging dir inside it.
fn expose(a: &Assembled, staging: &std::ffi::CStr, e: &Expose) -> Result<(), Errno> {
    let staging = Path::new(std::ffi::OsStr::from_bytes(staging.to_bytes()));
    let cstr = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL);
    let ctx = FsContext::open(c"tmpfs")?;
    ctx.set_string(c"size", c"65536")?;
    ctx.set_string(c"mode", c"755")?;
    let cover = ctx.mount(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)?;
    match e.cover.strip_prefix(staging) {
        Ok(rel) if e.cover != staging => {
            mkdir_p(a.staging.as_fd(), rel)?;
            move_mount_to_path(cover.as_fd(), a.staging.as_fd(), &cstr(rel)?)?;
        }
        _ => move_mount_to_path(cover.as_fd(), AT_FDCWD, &cstr(&e.cover)?)?,
    }
    for src in &e.trees {
        let path = path_of(src);
        let tree = src.tree()?;
        let (base, rel) = match (path.strip_prefix(&e.cover), path.strip_prefix(staging)) {
            (Ok(rel), _) => (cover.as_fd(), rel),
            (_, Ok(rel)) => (a.staging.as_fd(), rel),
            _ => return Err(Errno::EINVAL),
        };
        mkdir_p(base, rel)?;
        move_mount_to_path(tree, base, &cstr(rel)?)?;
    }
    Ok(())
}

/// Creates `rel` and its parents below `base` (a tmpfs of ours).
fn mkdir_p(base: std::os::fd::BorrowedFd<'_>, rel: &Path) -> Result<(), Errno> {
    let mut sofar = PathBuf::new();
    for c in rel.components() {
        sofar.push(c);
        let p = CString::new(sofar.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
        create_entry(base, &Entry::Dir { path: p, mode: 0o755 })?;
    }
    Ok(())
}
