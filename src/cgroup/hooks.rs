//! How the processes husk starts meet their cgroup: spawn and the exec
//! joiners call `CgroupJoin` around clone, the watch calls `GroupKill` at
//! the end. Declared here, beside their implementations, so the cgroup
//! facility depends on nothing that starts or watches processes.

use nix::errno::Errno;
use nix::unistd::Pid;
use std::os::fd::BorrowedFd;

/// Hook for the cgroup facility: the fd to clone into; `join_self`, run by
/// the child first thing after clone (unless `deferred`),
/// for hierarchies it cannot be born into (v1); and `attach`, run by the
/// parent before release. `born_inside` says the child was cloned into
/// `clone_into()`'s cgroup (false after the clone(2) fallback).
pub trait CgroupJoin {
    fn clone_into(&self) -> Option<BorrowedFd<'_>>;
    /// In the child: must not allocate.
    fn join_self(&self) -> Result<(), Errno>;
    fn attach(&self, pid: Pid, born_inside: bool) -> Result<(), super::CgroupError>;
    /// The parent finishes the cgroup after clone: the child skips
    /// `join_self` and instead waits for `Msg::CgroupReady` (with the
    /// files to join) before anything of the sandbox runs.
    fn deferred(&self) -> bool {
        false
    }
}

/// Group kill of everything in the sandbox beyond its pid namespace.
pub trait GroupKill {
    fn kill_all(&self);
}
