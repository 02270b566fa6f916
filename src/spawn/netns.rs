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

use crate::background::Background;
use crate::step::{AtStep, Step, StepError};
use crate::sys::Errno;
use crate::sys::process::SingleThreaded;
use std::os::fd::{AsFd, OwnedFd};

/// The new namespace's socket, or (after the netns was made?, errno).
type Made = Result<OwnedFd, (bool, Errno)>;

/// The init's network namespace while it may still be in the making. It
/// holds the init's `SingleThreaded` proof for as long as the thread may
/// run, and gives it back (`finish`) only once the thread is joined.
pub struct Netns {
    pending: Option<Background<Made>>,
    threaded: bool,
    one: SingleThreaded,
}

impl Netns {
    /// Starts making the namespace when the plan says the init makes one.
    pub fn start(wanted: bool, one: SingleThreaded) -> Netns {
        let pending = wanted.then(|| Background::start("husk:netns", crate::sys::net::new_netns_with_loopback));
        Netns { threaded: pending.is_some(), pending, one }
    }

    /// Whether a thread was started (it took a pid in the sandbox).
    pub fn threaded(&self) -> bool {
        self.threaded
    }

    /// The proof back, the thread joined and its namespace entered.
    pub fn finish(mut self) -> Result<SingleThreaded, StepError> {
        self.enter()?;
        Ok(self.one)
    }

    /// Joins the thread and enters its namespace; a no-op the second time.
    pub fn enter(&mut self) -> Result<(), StepError> {
        let Some(pending) = self.pending.take() else { return Ok(()) };
        let sock = match pending.join() {
            Ok(sock) => sock,
            Err((false, errno)) => return Err(StepError::new(Step::NewNetns, errno)),
            Err((true, errno)) => return Err(StepError::new(Step::Loopback, errno)),
        };
        crate::sys::net::enter_netns_of(sock.as_fd()).at(Step::NewNetns)
    }
}
