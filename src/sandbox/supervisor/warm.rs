//! The supervisor's warm interpreter or session (`create --warm` /
//! `--session`, docs/warm.md): started before READY, handed to each
//! `husk exec --code` as a control socket, reaped and started afresh when
//! it ends, killed before the sandbox's init is waited for. A zygote's
//! spare child (forked ahead of the next call) is moved into the next warm
//! exec's leaf here, on a thread of the supervisor, so the ~10 ms RCU wait
//! of a cgroup migration after an idle spell is off every call's path.

use super::refusal::{PlaceError, Refusal};
use super::{Supervisor, cgroup_err};
use crate::backend::Live;
use crate::cgroup::nested::Leaf;
use crate::sandbox::SandboxError;
use crate::sys::process::wait_pidfd;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

/// A spare being moved into its leaf by a thread; `done` turns readable
/// when the thread is through (the supervisor's loop polls it).
pub(super) struct Placing {
    seq: u64,
    pub(super) done: OwnedFd,
    thread: std::thread::JoinHandle<Result<(), PlaceError>>,
}

impl Placing {
    fn start(seq: u64, leaf: Leaf, pid: i32) -> Result<Placing, PlaceError> {
        let (done, tell) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(PlaceError::Pipe)?;
        let thread = std::thread::Builder::new()
            .name("husk-place".into())
            .spawn(move || {
                let r = leaf.adopt(nix::unistd::Pid::from_raw(pid)).map_err(PlaceError::Adopt);
                let _ = nix::unistd::write(&tell, b"x");
                r
            })
            .map_err(PlaceError::Thread)?;
        Ok(Placing { seq, done, thread })
    }

    fn join(self) -> Result<(), PlaceError> {
        self.thread.join().unwrap_or(Err(PlaceError::Panicked))
    }
}

/// The leaf a zygote's spare child goes into (`Supervisor::place_spare`).
pub(super) struct SpareLeaf {
    pub(super) leaf: String,
    /// A spare is in it (the shim was told `placed`).
    pub(super) placed: bool,
}

impl Supervisor {
    /// Starts the warm interpreter or session the spec asks for, as the
    /// sandbox's default exec user, in the cgroup leaf `warm`.
    pub(super) fn start_warm(&mut self, init: &dyn Live) -> Result<(), SandboxError> {
        let Some(w) = self.rec.spec.warm.clone() else { return Ok(()) };
        self.warm = None;
        // The sandbox's secrets reach code run by the interpreter as they
        // reach an exec's command (its output is redacted by husk exec).
        let env = crate::redact::env_pairs(&self.secrets);
        let spec = crate::spec::ExecSpec { argv: crate::warm::argv(&w), env, ..Default::default() };
        let mut plan = crate::sandbox::held::plan_in(&self.rec, &spec, crate::spawn::now_ns())?;
        plan.seccomp = crate::sandbox::held::seccomp_in(&self.rec, &self.dir)?;
        if self.warm_leaf.is_none()
            && let Some(tree) = &self.rec.cgroup
            && self.backend.exec_leaves()
        {
            self.warm_leaf = Some(tree.leaf("warm").map_err(cgroup_err)?);
        }
        let started =
            crate::backend::start_warm(self.backend.name(), &plan, init.namespaces(), self.warm_leaf.as_ref(), w.mode);
        match started {
            Ok(p) => {
                self.warm = Some(p);
                self.warm_error = None;
                Ok(())
            }
            Err(e) => {
                self.warm_error = Some(e.message.clone());
                Err(SandboxError::Setup(e))
            }
        }
    }

    /// The shim said something on its control socket: a zygote's spare
    /// child to place in the leaf the next warm exec gets. The move runs on
    /// a thread (`Placing`): it waits for an RCU grace period (~10 ms after
    /// an idle spell), and husk exec waits for this loop's answers. On any
    /// failure the spare stays unplaced, and calls fork afresh (and are
    /// moved on their own path, as before).
    pub(super) fn place_spare(&mut self) {
        let Some(w) = &self.warm else { return };
        let (seq, pidfd) = match crate::warm::recv_spare(w.ctl.as_fd()) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            // Its end is gone: the warm pidfd says so next, and restarts it.
            Err(_) => return,
        };
        let Some(tree) = self.rec.cgroup.as_ref().filter(|_| self.backend.exec_leaves()) else {
            // No cgroup leaves: nothing to move, the spare is placed as is.
            let _ = crate::warm::send_placed(w.ctl.as_fd(), seq, None);
            return;
        };
        // The leaf is made once and takes each spare in turn until a warm
        // exec takes it with its spare.
        let name = match self.warm_spare.take() {
            Some(s) => s.leaf,
            None => {
                let name = format!("exec-{}", crate::ids::new_id());
                if let Err(e) = tree.make_leaf(&name) {
                    crate::errln!("husk: warning: a leaf for the warm interpreter's next child: {e}");
                    return;
                }
                name
            }
        };
        let leaf = crate::sys::process::pidfd_pid(pidfd.as_fd())
            .ok_or(PlaceError::SpareGone)
            .and_then(|pid| Ok((pid, tree.open_leaf(&name).map_err(PlaceError::Leaf)?)));
        self.warm_spare = Some(SpareLeaf { leaf: name, placed: false });
        self.finish_placing();
        let started = leaf.and_then(|(pid, leaf)| Placing::start(seq, leaf, pid));
        match started {
            Ok(p) => self.placing = Some(p),
            Err(e) => crate::errln!("husk: warning: placing the warm interpreter's next child: {e}"),
        }
    }

    /// Waits for the move under way, if any; a spare that made it into its
    /// leaf is announced to the shim (`placed SEQ`).
    pub(super) fn finish_placing(&mut self) {
        let Some(p) = self.placing.take() else { return };
        let seq = p.seq;
        match p.join() {
            Ok(()) => {
                if let (Some(s), Some(w)) = (&mut self.warm_spare, &self.warm) {
                    s.placed = true;
                    let _ = crate::warm::send_placed(w.ctl.as_fd(), seq, Some(&s.leaf));
                }
            }
            Err(e) => crate::errln!("husk: warning: placing the warm interpreter's next child: {e}"),
        }
    }

    /// The leaf of a placed spare, for a warm exec (`exec --code`).
    pub(super) fn placed_leaf(&mut self, warm: bool) -> Option<String> {
        match &self.warm_spare {
            Some(s) if warm && s.placed => self.warm_spare.take().map(|s| s.leaf),
            _ => None,
        }
    }

    /// Kills and reaps the warm interpreter (its waiter is the
    /// supervisor's child, CLONE_PARENT): the sandbox's init cannot finish
    /// ending while that zombie of its pid namespace is unreaped.
    pub(super) fn stop_warm(&mut self) {
        self.finish_placing();
        if let Some(w) = self.warm.take() {
            let _ = crate::sys::process::pidfd_send_signal(w.pidfd.as_fd(), libc::SIGKILL);
            let _ = wait_pidfd(w.pidfd.as_fd());
        }
    }

    /// The warm interpreter ended (a session killed at a call's timeout, a
    /// crash, a kill from inside the sandbox): reaped and started afresh.
    pub(super) fn restart_warm(&mut self, init: &dyn Live) {
        if let Some(w) = self.warm.take() {
            let _ = wait_pidfd(w.pidfd.as_fd());
        }
        // Its spare died with its pid namespace: the leaf takes the next.
        // (The move's thread is joined first: the new shim is cloned, and a
        // clone needs a single-threaded supervisor.)
        self.finish_placing();
        if let Some(s) = &mut self.warm_spare {
            s.placed = false;
        }
        if let Err(e) = self.start_warm(init) {
            self.warm_error = Some(format!("it ended and could not be restarted: {e}"));
        }
    }

    /// The control socket an `exec --code` gets, or why there is none. An
    /// interpreter that could not be restarted when it ended is tried once
    /// more for each call: what stopped it (a call's processes holding
    /// every pid, `fork: EAGAIN`) dies with that call's leaf.
    pub(super) fn warm_socket(&mut self, init: &dyn Live) -> Result<RawFd, Refusal> {
        if self.warm.is_none() && self.rec.spec.warm.is_some() && self.warm_error.is_some() {
            self.finish_placing();
            if let Err(e) = self.start_warm(init) {
                self.warm_error = Some(format!("it ended and could not be restarted: {e}"));
            }
        }
        match (&self.warm, &self.rec.spec.warm, &self.warm_error) {
            (Some(w), _, _) => Ok(w.ctl.as_raw_fd()),
            (None, None, _) => Err(Refusal::NotWarm),
            (None, Some(_), Some(e)) => Err(Refusal::WarmDown(e.clone())),
            (None, Some(_), None) => Err(Refusal::WarmNotRunning),
        }
    }
}
