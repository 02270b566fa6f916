//! `husk exec` in a native sandbox: a joiner enters the namespaces the
//! supervisor handed over (`super::join`), the command is confined as
//! `run`'s is, and it is watched like `run`'s (pidfd, capture pipes,
//! deadline, forwarded signals).
//!
//! Each exec gets a leaf of the sandbox's cgroup (`exec-<id>`): its own
//! accounting and its own kill, under the sandbox's limits; a timeout kills
//! that leaf only. Without cgroups (`--no-cgroup`, or rootless without a
//! delegated cgroup) a timeout kills the command's session instead: every
//! process whose session is the command's (it is a session leader), which
//! misses only processes that started sessions of their own.

use super::join::{self, Join, JoinError};
use super::{Ended, add_cgroup};
use crate::backend::{Attached, Executed};
use crate::cgroup::CgroupJoin;
use crate::cgroup::GroupKill;
use crate::cgroup::nested::{Leaf, Tree};
use crate::cgroup::report::{AppliedLimits, CgroupReport};
use crate::outcome::{ErrorReport, Outcome};
use crate::plan::{ExecPlan, ProcessPlan};
use crate::spawn::command::Confinement;
use crate::spawn::{ChildStdio, now_ns, phase};
use crate::step::{Phase, Step};
use crate::supervise::{Watch, Watched, signal_fd};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

/// What the supervisor failed to hand over, in the words `husk exec` has
/// always used for it.
fn supervisor_err(message: &str) -> ErrorReport {
    ErrorReport::new(Phase::Supervisor, format!("sandbox supervisor: {message}"))
}

/// Runs the exec. `Err` only when nothing was started; everything after
/// (the command's own setup, its end) is in the outcome.
pub fn exec(plan: &ExecPlan, at: Attached<'_>) -> Result<Executed, ErrorReport> {
    let Attached { cgroup, limits, leaf, ns_kinds, ns_fds, tap, redact, .. } = at;
    let flag_of = |kind: &str| {
        crate::spawn::child::NAMESPACES.iter().find(|(_, _, k)| *k == kind).map(|(_, f, _)| *f).unwrap_or(0)
    };
    let namespaces: Vec<(libc::c_int, OwnedFd)> = ns_kinds.iter().map(|k| flag_of(k)).zip(ns_fds).collect();
    if namespaces.len() != ns_kinds.len() || namespaces.iter().any(|(f, _)| *f == 0) {
        return Err(supervisor_err("the supervisor sent an incomplete set of namespaces"));
    }

    // The supervisor made the exec's leaf ahead of time (and removes it
    // when the exec's connection closes): only its files are opened here.
    let t_cg = now_ns();
    let (exec_id, leaf) = exec_leaf(cgroup, leaf)?;
    let cgroup_setup = ms(t_cg, now_ns());
    let run = Run { plan, cgroup, limits, exec_id: &exec_id, cgroup_setup, tap, redact };
    let outcome = run.go(namespaces, leaf);
    Ok(Executed { exec_id, outcome, backend: "native" })
}

/// The exec's id and its leaf, opened: the leaf the supervisor made ahead
/// of time (and removes when the exec's connection closes), or, without a
/// cgroup, a fresh id.
pub(super) fn exec_leaf(cgroup: Option<&Tree>, leaf: Option<&str>) -> Result<(String, Option<Leaf>), ErrorReport> {
    match (cgroup, leaf) {
        (Some(tree), Some(name)) => {
            let leaf = tree
                .open_leaf(name)
                .map_err(|e| ErrorReport::new(Phase::Cgroup, e.to_string()).with_errno(e.errno()))?;
            Ok((name.strip_prefix("exec-").unwrap_or(name).to_string(), Some(leaf)))
        }
        (Some(_), None) => Err(supervisor_err("the supervisor sent no cgroup leaf")),
        (None, _) => Ok((crate::ids::new_id(), None)),
    }
}

pub(super) fn ms(from: u64, to: u64) -> f64 {
    crate::outcome::round3(to.saturating_sub(from) as f64 / 1e6)
}

struct Run<'a> {
    plan: &'a ExecPlan,
    cgroup: Option<&'a Tree>,
    limits: Option<&'a AppliedLimits>,
    exec_id: &'a str,
    cgroup_setup: f64,
    tap: Option<&'a crate::stream::Tap>,
    redact: &'a crate::redact::Redaction,
}

impl Run<'_> {
    fn go(&self, namespaces: Vec<(libc::c_int, OwnedFd)>, leaf: Option<Leaf>) -> Outcome {
        let (process, workdir, seccomp) =
            (&self.plan.process, self.plan.workdir_c.as_c_str(), self.plan.seccomp.as_ref());
        let failed = |step: Phase, e: &dyn std::fmt::Display, errno: Option<nix::errno::Errno>| {
            let mut o = Outcome::setup_failed(ErrorReport::new(step, e.to_string()).with_errno(errno));
            o.duration_ms = ms(self.plan.t_start, now_ns());
            o
        };
        let tty = process.tty;
        let signals = match signal_fd(tty) {
            Ok(s) => s,
            Err(e) => return failed(Phase::Signals, &e, Some(e)),
        };
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
        // Under -t the command's output comes through its pty, not pipes.
        let (out, err) = match self.plan.capture {
            Some(_) if !tty => match (pipe(), pipe()) {
                (Ok(o), Ok(e)) => (Some(o), Some(e)),
                (Err(e), _) | (_, Err(e)) => return failed(Phase::Stdio, &e, Some(e)),
            },
            _ => (None, None),
        };
        let null = match crate::tty::null_stdio(tty) {
            Ok(n) => n,
            Err(e) => return failed(Phase::Stdio, &e, Some(e)),
        };
        let null_fd = null.as_ref().map(|n| n.as_raw_fd());
        let stdio = ChildStdio {
            stdin: null_fd,
            stdout: out.as_ref().map(|(_, w)| w.as_raw_fd()).or(null_fd),
            stderr: err.as_ref().map(|(_, w)| w.as_raw_fd()).or(null_fd),
        };
        let confinement =
            Confinement { process, deny_setgroups: self.plan.deny_setgroups, last_cap: self.plan.last_cap, seccomp };
        let join = Join {
            namespaces,
            confinement,
            workdir,
            stdio,
            cgroup: leaf.as_ref().map(|l| l as &dyn CgroupJoin),
            pid_ns: join::PidNs::Sandbox,
        };
        let joined = match join::spawn(join) {
            Ok(j) => j,
            Err(e) => {
                let errno = match &e {
                    JoinError::Clone(errno) | JoinError::Channel(errno) => Some(*errno),
                    JoinError::Cgroup(c) => c.errno(),
                    JoinError::Step(s) => Some(s.errno),
                    JoinError::Vanished => None,
                    JoinError::Threads(e) => e.errno(),
                };
                return failed(step_of(&e), &e, errno);
            }
        };
        let limit = self.plan.capture.unwrap_or(0);
        // Our copies of the write ends must go, or the reads never see EOF.
        let stdout = out.map(|(r, _w)| (r, limit));
        let stderr = err.map(|(r, _w)| (r, limit));
        let session = SessionKill { sid: pid_of(&joined.pidfd).unwrap_or(0), pidfd: &joined.pidfd };
        let group: &dyn GroupKill = match &leaf {
            Some(l) => l,
            None => &session,
        };
        let watched = Watch {
            pidfd: &joined.pidfd,
            chan: &joined.chan,
            signals: &signals,
            stdout,
            stderr,
            timeout: self.plan.timeout,
            kill_grace: self.plan.kill_grace,
            group: Some(group),
            seccomp,
            stop: None,
            tap: self.tap,
            redact: self.redact,
            tty: crate::tty::relay::TtyOutput::of(tty, self.plan.capture),
            status: crate::supervise::StatusFrom::Wait,
        }
        .run();
        let t_end = now_ns();
        let phases = self.phases(&watched, joined.t_clone);
        let status =
            watched.init.ok_or_else(|| ErrorReport::new(Phase::Wait, "the command's status could not be read"));
        let ended = Ended { command: watched.init, status, seccomp };
        let mut o = ended.outcome(watched, phases, |e| describe(process, e));
        let has_leaf = leaf.is_some();
        let cgroup = leaf.map(|l| {
            let report = CgroupReport { limits: Default::default(), usage: l.usage(), cleanup: None };
            (report, self.cgroup_setup, ms(t_end, now_ns()))
        });
        add_cgroup(&mut o, cgroup);
        if has_leaf {
            // The sandbox's limits hold the exec; its usage is its leaf's.
            let mut limits = self.limits.cloned();
            if let Some(AppliedLimits::Cgroup(l)) = &mut limits {
                l.cgroup.paths = self.leaf_paths();
            }
            o.limits = limits;
        }
        o.duration_ms = ms(self.plan.t_start, now_ns());
        o
    }

    fn leaf_paths(&self) -> Vec<String> {
        let name = format!("exec-{}", self.exec_id);
        self.cgroup.iter().flat_map(|t| &t.dirs).map(|d| d.path.join(&name).display().to_string()).collect()
    }

    /// The phases of an exec, from the joiner's step times.
    fn phases(&self, w: &Watched, t_clone: u64) -> BTreeMap<&'static str, f64> {
        let mut phases = BTreeMap::new();
        phases.insert("plan", ms(self.plan.t_start, t_clone));
        if let Some(t) = w.times {
            phases.insert("join", ms(t_clone, t[phase::NAMESPACES]));
            phases.insert("confine", ms(t[phase::NAMESPACES], t[phase::CONFINED]));
            phases.insert("seccomp", ms(t[phase::CONFINED], t[phase::SECCOMP]));
            phases.insert("run", ms(t[phase::SECCOMP], w.t_exit.max(t[phase::SECCOMP])));
        }
        phases
    }
}

fn step_of(e: &JoinError) -> Phase {
    match e {
        JoinError::Clone(_) | JoinError::Threads(_) => Phase::Clone,
        JoinError::Channel(_) => Phase::SyncChannel,
        JoinError::Cgroup(_) => Phase::Step(Step::JoinCgroup),
        JoinError::Step(s) => Phase::Step(s.step),
        JoinError::Vanished => Phase::Step(Step::JoinNamespaces),
    }
}

/// A failed step of the command, in the words `run` uses.
pub(super) fn describe(process: &ProcessPlan, e: &crate::step::StepError) -> ErrorReport {
    let (message, hint) = match (e.step, e.errno) {
        (Step::Exec, errno) => (super::exec_failure(process, errno), None),
        (Step::Chdir, errno) => (
            format!("cannot enter the workdir: {errno:?} ({})", errno.desc()),
            Some("give an existing directory inside the sandbox that the exec's user may enter (--workdir)".into()),
        ),
        (step, errno) => (format!("exec setup failed at {}: {errno:?} ({})", step.name(), errno.desc()), None),
    };
    ErrorReport::new(e.step, message).with_errno(e.errno).with_hint(hint)
}

pub(super) fn pid_of(pidfd: &OwnedFd) -> Option<i32> {
    crate::sys::process::pidfd_pid(std::os::fd::AsFd::as_fd(pidfd))
}

/// The group kill without a cgroup: SIGKILL to every process in the
/// command's session (it is a session leader: sid = its host pid, which the
/// kernel does not reuse while the session has members).
pub(super) struct SessionKill<'a> {
    pub(super) sid: i32,
    pub(super) pidfd: &'a OwnedFd,
}

impl GroupKill for SessionKill<'_> {
    fn kill_all(&self) {
        use std::os::fd::AsFd;
        let _ = crate::sys::process::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL);
        if self.sid <= 1 {
            return;
        }
        for _ in 0..50 {
            let members = session_members(self.sid);
            if members.is_empty() {
                return;
            }
            for p in members {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Live (non-zombie) processes whose session id is `sid`.
fn session_members(sid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return false };
            let f: Vec<&str> = rest.split_whitespace().collect();
            // After ") ": state (3), ppid, pgrp, session (6).
            f.first().is_some_and(|s| *s != "Z") && f.get(3).and_then(|s| s.parse::<i32>().ok()) == Some(sid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_sweep_finds_a_session_by_its_leader() {
        let mut child = std::process::Command::new("setsid").args(["sh", "-c", "sleep 30 & sleep 30"]).spawn().unwrap();
        let sid = child.id() as i32;
        let mut members = Vec::new();
        for _ in 0..100 {
            members = session_members(sid);
            if members.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(members.len() >= 2, "{members:?}");
        for p in members {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
        }
        let _ = child.wait();
    }
}
