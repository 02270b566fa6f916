//! Starting the sandbox: the parent's side (clone3 into fresh namespaces,
//! id maps, release) and, in submodules, the child's ordered setup steps,
//! the command's confinement and the pid-1 reaper.

pub mod child;
pub mod command;
pub mod factory;
pub mod init;
#[cfg(test)]
mod tests;

use crate::cgroup::CgroupJoin;
use crate::plan::Plan;
use crate::sync::{Channel, Msg};
use crate::sys::Errno;
use crate::sys::process::{Forked, SingleThreaded, ThreadsError, clone_legacy, clone3, exit_now};
use nix::unistd::Pid;
use std::os::fd::{OwnedFd, RawFd};

/// Indexes into the child's timestamp array (CLOCK_MONOTONIC ns).
pub mod phase {
    pub const CHILD_START: usize = 0;
    pub const RELEASED: usize = 1;
    pub const NAMESPACES: usize = 2;
    pub const MOUNTS: usize = 3;
    pub const PIVOT: usize = 4;
    pub const CONFINED: usize = 5;
    pub const SECCOMP: usize = 6;
}

/// Monotonic nanoseconds (same clock as std's Instant on Linux).
pub fn now_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Where the sandbox's stdin/stdout/stderr come from: inherited, or these
/// fds (capture pipes; /dev/null for all three under `-t`, so husk's
/// terminal never enters the sandbox).
#[derive(Clone, Copy, Debug)]
pub struct ChildStdio {
    pub stdin: Option<RawFd>,
    pub stdout: Option<RawFd>,
    pub stderr: Option<RawFd>,
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("creating the sandbox process (clone3 with {flags}): {errno}")]
    Clone { flags: String, errno: Errno, hint: Option<String> },
    #[error("opening mount source {path}: {errno}")]
    Source { path: String, errno: Errno },
    #[error("idmapping :rw bind source {path}: {why}")]
    Idmap { path: String, errno: Option<Errno>, why: String },
    #[error("sync channel: {0}")]
    Channel(Errno),
    #[error(transparent)]
    IdMap(#[from] crate::userns::IdMapError),
    #[error("attaching the sandbox to its cgroup: {0}")]
    Cgroup(crate::cgroup::CgroupError),
    #[error("before creating the sandbox process: {0}")]
    Threads(#[from] ThreadsError),
}

/// A started sandbox, released and running its setup.
pub struct Spawned {
    pub pid: Pid,
    pub pidfd: OwnedFd,
    pub chan: Channel,
    /// Monotonic ns just before clone.
    pub t_clone: u64,
}

/// Privileged runs clone every host tree here, as host root (see
/// `rootfs::Source`); rootless runs leave it to the child.
pub fn open_sources(plan: &Plan) -> Result<(), SpawnError> {
    if plan.ids.deny_setgroups {
        return Ok(());
    }
    // One idmap namespace per distinct owner, shared by its binds.
    let mut folds: Vec<(crate::userns::IdFold, OwnedFd)> = Vec::new();
    for src in plan.mounts.sources() {
        let path = || src.path.to_string_lossy().into_owned();
        let Some(fold) = src.fold else {
            src.open().map_err(|errno| SpawnError::Source { path: path(), errno })?;
            continue;
        };
        let i = match folds.iter().position(|(f, _)| *f == fold) {
            Some(i) => i,
            None => {
                let ns = crate::userns::fold_namespace(&fold).map_err(|e| SpawnError::Idmap {
                    path: path(),
                    errno: e.errno(),
                    why: e.to_string(),
                })?;
                folds.push((fold, ns));
                folds.len() - 1
            }
        };
        src.open_folded(std::os::fd::AsFd::as_fd(&folds[i].1)).map_err(|(call, errno)| SpawnError::Idmap {
            path: path(),
            errno: Some(errno),
            why: idmap_refusal(call, errno),
        })?;
    }
    Ok(())
}

/// Why a `:rw` bind could not be idmapped, and what the user can do.
fn idmap_refusal(call: &str, errno: Errno) -> String {
    match errno {
        Errno::EINVAL => format!(
            "{call}: {errno}: its filesystem does not support idmapped mounts, which a :rw bind of a directory \
             an unprivileged user owns needs (so the sandbox's root writes there as that owner); bind it :ro, \
             or bind a directory on a filesystem that supports them (ext4, xfs, btrfs, tmpfs)"
        ),
        Errno::ENOSYS => format!(
            "{call}: {errno}: this kernel has no idmapped mounts (Linux 5.12 or later), which a :rw bind of a \
             directory an unprivileged user owns needs; bind it :ro"
        ),
        _ => format!("{call}: {errno}"),
    }
}

/// Explains a clone failure in terms of the host setting that causes it
/// (the host is probed only now, on the failure path).
fn clone_hint(errno: Errno) -> Option<String> {
    crate::host::blockers::clone_hint(&crate::host::HostView::probe(), errno)
}

/// clone3 into the plan's namespaces, write the id maps, attach to the
/// cgroup and release the child. The child never returns from here.
pub fn spawn(plan: &Plan, stdio: ChildStdio, cgroup: Option<&dyn CgroupJoin>) -> Result<Spawned, SpawnError> {
    let one = SingleThreaded::check()?;
    let (parent_end, child_end) = Channel::pair().map_err(SpawnError::Channel)?;
    let flags = plan.namespaces.clone_flags;
    let t_clone = now_ns();
    let into = cgroup.and_then(|c| c.clone_into());
    let mut born_inside = into.is_some();
    let forked = match clone3(&one, flags, into) {
        Err(Errno::ENOSYS) | Err(Errno::E2BIG) => {
            born_inside = false;
            clone_legacy(&one, flags)
        }
        other => other,
    };
    match forked {
        Err(errno) => {
            Err(SpawnError::Clone { flags: plan.namespaces.clone_names().join(","), errno, hint: clone_hint(errno) })
        }
        Ok(Forked::Child(alone)) => {
            drop(parent_end);
            let deferred = cgroup.is_some_and(|c| c.deferred());
            if let Some(cg) = cgroup
                && !deferred
                && let Err(errno) = cg.join_self()
            {
                fail(&child_end, crate::step::StepError::new(crate::step::Step::JoinCgroup, errno));
            }
            child::run(plan, &child_end, stdio, deferred, alone)
        }
        Ok(Forked::Parent { pid, pidfd }) => {
            drop(child_end);
            let pidfd = pidfd.expect("clone asked for a pidfd");
            let kill = |pidfd: &OwnedFd| {
                use std::os::fd::AsFd;
                let _ = crate::sys::process::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                let _ = crate::sys::process::wait_pidfd(pidfd.as_fd());
            };
            if let Err(e) = plan.ids.write(pid) {
                kill(&pidfd);
                return Err(e.into());
            }
            if let Some(cg) = cgroup
                && let Err(e) = cg.attach(pid, born_inside)
            {
                kill(&pidfd);
                return Err(SpawnError::Cgroup(e));
            }
            if let Err(e) = parent_end.send(Msg::Release) {
                kill(&pidfd);
                return Err(SpawnError::Channel(e));
            }
            Ok(Spawned { pid, pidfd, chan: parent_end, t_clone })
        }
    }
}

/// The child's last word on a failed step; never returns.
pub(crate) fn fail(chan: &Channel, err: crate::step::StepError) -> ! {
    let _ = chan.send(Msg::Failed(err));
    exit_now(125)
}
