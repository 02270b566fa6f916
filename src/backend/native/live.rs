//! A native sandbox that lives (`husk create`): its init is cloned exactly
//! as `run`'s, but holds instead of running a command, and hands its
//! namespaces to the supervisor (`spawn::child::hand_over`), which gives
//! them to each exec (`super::exec`).

use super::{describe, spawn_error};
use crate::backend::Live;
use crate::cgroup::CgroupJoin;
use crate::outcome::ErrorReport;
use crate::plan::Plan;
use crate::spawn::{ChildStdio, Spawned};
use crate::step::Phase;
use crate::sync::Msg;
use crate::sys::process::{pidfd_send_signal, wait_pidfd};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// Bound on the sandbox's setup (mounts of a slow filesystem...).
const SETUP_LIMIT: Duration = Duration::from_secs(60);

/// The held init and the namespaces it handed over.
pub struct NativeLive {
    init: Spawned,
    /// In join order, with their kinds.
    namespaces: Vec<(&'static str, OwnedFd)>,
}

/// Clones the init (born in `cgroup`) and waits until it holds.
pub fn create(plan: &Plan, cgroup: Option<&dyn CgroupJoin>) -> Result<Box<dyn Live>, ErrorReport> {
    crate::spawn::open_sources(plan).map_err(spawn_error)?;
    let stdio = ChildStdio { stdin: None, stdout: None, stderr: None };
    let init = crate::spawn::spawn(plan, stdio, cgroup).map_err(spawn_error)?;
    match await_init(plan, &init) {
        Ok(namespaces) => Ok(Box::new(NativeLive { init, namespaces })),
        Err(e) => {
            let _ = pidfd_send_signal(init.pidfd.as_fd(), libc::SIGKILL);
            let _ = wait_pidfd(init.pidfd.as_fd());
            Err(e)
        }
    }
}

/// Waits for the init's namespaces (its last word after setup).
fn await_init(plan: &Plan, s: &Spawned) -> Result<Vec<(&'static str, OwnedFd)>, ErrorReport> {
    let deadline = Instant::now() + SETUP_LIMIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds = [PollFd::new(s.chan.fd(), PollFlags::POLLIN)];
        let t = PollTimeout::try_from(left.as_millis().min(60_000) as u64).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, t) {
            Ok(0) => return Err(ErrorReport::new(Phase::Setup, "the sandbox's setup took longer than 60s")),
            Err(nix::errno::Errno::EINTR) | Ok(_) => {}
            Err(e) => return Err(ErrorReport::new(Phase::SyncChannel, e.to_string()).with_errno(e)),
        }
        match s.chan.recv_with_fds() {
            Ok(Some((Msg::Namespaces { count }, fds))) if fds.len() == count as usize => {
                let kinds = crate::spawn::child::namespaces_of(plan.network).map(|(_, _, k)| *k);
                return Ok(kinds.zip(fds).collect());
            }
            Ok(Some((Msg::Failed(e), _))) => {
                let (message, hint) = describe(plan, &e);
                return Err(ErrorReport::new(e.step, message).with_errno(e.errno).with_hint(hint));
            }
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return Err(ErrorReport::new(Phase::Init, "the sandbox's init ended during setup")),
        }
    }
}

impl Live for NativeLive {
    fn pid(&self) -> i32 {
        self.init.pid.as_raw()
    }

    fn pidfd(&self) -> &OwnedFd {
        &self.init.pidfd
    }

    fn namespaces(&self) -> &[(&'static str, OwnedFd)] {
        &self.namespaces
    }

    /// The cgroup first (every process, execs' included), then the init,
    /// whose end ends its pid namespace; the namespaces' last references
    /// go with the handle.
    fn stop(self: Box<Self>, kill_group: &dyn Fn()) {
        kill_group();
        let _ = pidfd_send_signal(self.init.pidfd.as_fd(), libc::SIGKILL);
        let _ = wait_pidfd(self.init.pidfd.as_fd());
    }
}
