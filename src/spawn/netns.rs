//! The sandbox's network namespace, made on a second thread of the init
//! while the init assembles the root.
//!
//! Creating a network namespace is the costliest part of starting a sandbox
//! (about 0.6 ms on the reference machine, `clone` with CLONE_NEWNET against
//! without), and none of the mount work depends on it. So the init is cloned
//! without CLONE_NEWNET; right after it becomes root in its user namespace
//! (so the new netns is owned by the sandbox's user namespace, exactly as
//! with CLONE_NEWNET) a thread unshares a netns, brings "lo" up in it and
//! hands back a socket that lives there; the init setns()es into that
//! socket's namespace before it mounts sysfs (sysfs shows the mounter's
//! network devices and refuses a netns the mounter does not own) and before
//! anything of the sandbox runs. No /proc is needed for it (SIOCGSKNS).

use super::step::{AtStep, Step, StepError};
use crate::sys::Errno;
use std::os::fd::{AsFd, OwnedFd};

type Made = Result<OwnedFd, (bool, Errno)>;

/// A network namespace being made; `enter` waits for it and moves the
/// calling thread into it.
pub struct PendingNetns(Option<std::thread::JoinHandle<Made>>);

impl PendingNetns {
    pub fn start() -> Result<PendingNetns, StepError> {
        let handle = std::thread::Builder::new()
            .name("husk:netns".into())
            .stack_size(64 << 10)
            .spawn(crate::sys::net::new_netns_with_loopback)
            .map_err(|e| StepError::new(Step::NewNetns, e.raw_os_error().map_or(Errno::EAGAIN, Errno::from_raw)))?;
        // Side by side, or the thread would only run once `enter` blocks.
        crate::sys::process::pin_to_other_cpu(std::os::unix::thread::JoinHandleExt::as_pthread_t(&handle));
        Ok(PendingNetns(Some(handle)))
    }

    /// Joins the thread and enters its namespace; a no-op the second time.
    pub fn enter(&mut self) -> Result<(), StepError> {
        let Some(handle) = self.0.take() else { return Ok(()) };
        let sock = match handle.join() {
            Ok(Ok(sock)) => sock,
            Ok(Err((false, errno))) => return Err(StepError::new(Step::NewNetns, errno)),
            Ok(Err((true, errno))) => return Err(StepError::new(Step::Loopback, errno)),
            Err(_) => return Err(StepError::new(Step::NewNetns, Errno::EIO)),
        };
        crate::sys::net::enter_netns_of(sock.as_fd()).at(Step::NewNetns)
    }
}
