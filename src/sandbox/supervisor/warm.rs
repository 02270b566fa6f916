//! The supervisor's warm interpreter or session (`create --warm` /
//! `--session`, docs/warm.md): started before READY, handed to each
//! `husk exec --code` as a control socket, reaped and started afresh when
//! it ends, killed before the sandbox's init is waited for.

use super::{Supervisor, cgroup_err};
use crate::backend::Live;
use crate::sandbox::SandboxError;
use crate::sys::process::wait_pidfd;
use std::os::fd::{AsFd, AsRawFd, RawFd};

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

    /// Kills and reaps the warm interpreter (its waiter is the
    /// supervisor's child, CLONE_PARENT): the sandbox's init cannot finish
    /// ending while that zombie of its pid namespace is unreaped.
    pub(super) fn stop_warm(&mut self) {
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
        if let Err(e) = self.start_warm(init) {
            self.warm_error = Some(format!("it ended and could not be restarted: {e}"));
        }
    }

    /// The control socket an `exec --code` gets, or why there is none.
    pub(super) fn warm_socket(&self) -> Result<RawFd, String> {
        match (&self.warm, &self.rec.spec.warm, &self.warm_error) {
            (Some(w), _, _) => Ok(w.ctl.as_raw_fd()),
            (None, None, _) => Err("the sandbox was created without --warm or --session".into()),
            (None, Some(_), Some(e)) => Err(e.clone()),
            (None, Some(_), None) => Err("it is not running".into()),
        }
    }
}
