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
    /// `--network allow=`: the egress proxy, for the sandbox's whole life.
    egress: Option<crate::net::EgressProxy>,
    /// `--publish`: the forwarder of its ports, for the sandbox's whole life.
    forwarder: Option<crate::net::publish::Forwarder>,
}

/// Clones the init (born in `cgroup`) and waits until it holds.
pub fn create(plan: &Plan, cgroup: Option<&dyn CgroupJoin>) -> Result<Box<dyn Live>, ErrorReport> {
    crate::spawn::open_sources(plan).map_err(spawn_error)?;
    let stdio = ChildStdio { stdin: None, stdout: None, stderr: None };
    let init = crate::spawn::spawn(plan, stdio, cgroup).map_err(spawn_error)?;
    match await_init(plan, &init) {
        Ok((namespaces, egress, forwarder)) => Ok(Box::new(NativeLive { init, namespaces, egress, forwarder })),
        Err(e) => {
            let _ = pidfd_send_signal(init.pidfd.as_fd(), libc::SIGKILL);
            let _ = wait_pidfd(init.pidfd.as_fd());
            Err(e)
        }
    }
}

type Namespaces = Vec<(&'static str, OwnedFd)>;
type Held = (Namespaces, Option<crate::net::EgressProxy>, Option<crate::net::publish::Forwarder>);

/// Waits for the init's namespaces (its last word after setup); under
/// `--network allow=` starts the egress proxy on the listeners it handed
/// over before them (fail closed: no proxy, no sandbox).
fn await_init(plan: &Plan, s: &Spawned) -> Result<Held, ErrorReport> {
    let deadline = Instant::now() + SETUP_LIMIT;
    let mut egress = None;
    let mut forwarder = None;
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
                if plan.spec.egress.is_some() && egress.is_none() {
                    return Err(ErrorReport::new(
                        Phase::EgressProxy,
                        "the sandbox's init did not hand over the egress proxy's listeners",
                    ));
                }
                if !plan.spec.publish.is_empty() && forwarder.is_none() {
                    return Err(ErrorReport::new(
                        Phase::Publish,
                        "the sandbox's init did not hand over the publish socket factory",
                    ));
                }
                let kinds = crate::spawn::child::namespaces_of(plan.network).map(|(_, _, k)| *k);
                return Ok((kinds.zip(fds).collect(), egress, forwarder));
            }
            Ok(Some((Msg::EgressListeners, fds))) if fds.len() == 2 => {
                let Some(spec) = &plan.spec.egress else { continue };
                let mut fds = fds.into_iter();
                let (Some(http), Some(socks)) = (fds.next(), fds.next()) else { continue };
                let proxy = crate::net::EgressProxy::start(spec, http, socks)
                    .map_err(|e| ErrorReport::new(Phase::EgressProxy, e.to_string()))?;
                egress = Some(proxy);
            }
            Ok(Some((Msg::PublishFactory, fds))) if fds.len() == 1 => {
                let Some(factory) = fds.into_iter().next() else { continue };
                let f = crate::net::publish::Forwarder::start(&plan.spec.publish, factory)
                    .map_err(|e| ErrorReport::new(Phase::Publish, e.to_string()))?;
                forwarder = Some(f);
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

    fn published(&self) -> Vec<crate::net::publish::Published> {
        self.forwarder.as_ref().map(|f| f.published.clone()).unwrap_or_default()
    }

    fn network(&self) -> Option<crate::net::account::NetworkReport> {
        let proxy = self.egress.as_ref()?;
        Some(proxy.snapshot().unwrap_or_else(|| proxy.unanswered()))
    }

    /// The cgroup first (every process, execs' included), then the init,
    /// whose end ends its pid namespace; the namespaces' last references
    /// go with the handle.
    fn stop(self: Box<Self>, kill_group: &dyn Fn()) {
        kill_group();
        let _ = pidfd_send_signal(self.init.pidfd.as_fd(), libc::SIGKILL);
        let _ = wait_pidfd(self.init.pidfd.as_fd());
        // The sandbox is gone: its proxy and the listeners only it held go
        // too (no port of it is left anywhere).
        if let Some(p) = self.egress {
            p.finish();
        }
        drop(self.forwarder);
    }
}
