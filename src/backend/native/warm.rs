//! Warm interpreters in a native sandbox (docs/warm.md).
//!
//! `start`: the supervisor runs the shim (`crate::warm`) as an exec of its
//! own: joined like every exec (`super::join`), confined by the sandbox's
//! default exec plan (identity, capabilities, rlimits, no_new_privs, the
//! seccomp filter), in a cgroup leaf `warm`, and, in fork mode, as the init
//! of a pid namespace nested in the sandbox's (`join::PidNs::Own`).
//!
//! `call`: `husk exec --code` hands the shim one call over the control
//! socket the supervisor passed it, and watches the process that runs it
//! as it watches an exec's command (`supervise::Watch`, the status coming
//! over the status channel since that process is not husk exec's child).
//! In fork mode that process is a child of the zygote, in the exec's own
//! cgroup leaf before it may run anything (it waits for `Release`): the
//! spare the supervisor moved there ahead, or a fresh child husk exec moves
//! there itself (`Leaf::holds`, `Leaf::adopt`). Its own accounting, OOM and
//! timeout kill, exactly as a command's. A session call runs in the session itself (its leaf is the
//! session's), which interrupts it at its timeout; husk exec's own
//! deadline, a little later, kills the session if that did not work.

use super::exec::{SessionKill, describe, ms, pid_of};
use super::join::{self, Join, PidNs};
use super::{Ended, add_cgroup};
use crate::backend::{Attached, Executed};
use crate::cgroup::nested::Leaf;
use crate::cgroup::report::{AppliedLimits, CgroupReport};
use crate::cgroup::{CgroupJoin, GroupKill};
use crate::outcome::{ErrorReport, Outcome};
use crate::plan::ExecPlan;
use crate::spawn::command::Confinement;
use crate::spawn::{ChildStdio, now_ns};
use crate::spec::WarmMode;
use crate::step::Phase;
use crate::supervise::{StatusFrom, Watch, signal_fd};
use crate::sync::{Channel, Msg};
use crate::sys::process::{pidfd_send_signal, wait_pidfd};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// How much longer than a session call's own timeout husk exec waits
/// before it kills the session (which then restarts).
pub const SESSION_BACKSTOP: Duration = Duration::from_secs(2);

/// How long husk exec waits for the processes a call left to be gone
/// after it killed them (the kill is asynchronous on cgroup v2).
const LEFTOVERS_LIMIT: Duration = Duration::from_secs(2);

/// How long the shim may take to answer a call with its pidfd.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// A started shim: its waiter's pidfd (ends when the shim does) and the
/// supervisor's end of the control socket.
pub struct WarmProc {
    pub pidfd: OwnedFd,
    pub ctl: OwnedFd,
}

fn warm_err(message: impl std::fmt::Display) -> ErrorReport {
    ErrorReport::new(Phase::Warm, message.to_string())
}

/// Starts the shim in the sandbox whose namespaces are `namespaces`, and
/// waits until it has imported its modules.
pub fn start(
    plan: &ExecPlan,
    namespaces: &[(&'static str, OwnedFd)],
    leaf: Option<&Leaf>,
    mode: WarmMode,
) -> Result<WarmProc, ErrorReport> {
    let flag_of = |kind: &str| {
        crate::spawn::child::NAMESPACES.iter().find(|(_, _, k)| *k == kind).map(|(_, f, _)| *f).unwrap_or(0)
    };
    let mut ns = Vec::new();
    for (kind, fd) in namespaces {
        let dup = fd.try_clone().map_err(|e| warm_err(format!("duplicating the {kind} namespace: {e}")))?;
        ns.push((flag_of(kind), dup));
    }
    let (mine, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| warm_err(format!("control socket: {e}")).with_errno(Some(e)))?;
    let null = nix::fcntl::open(
        c"/dev/null",
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| warm_err(format!("/dev/null: {e}")).with_errno(Some(e)))?;
    let stdio =
        ChildStdio { stdin: Some(theirs.as_raw_fd()), stdout: Some(null.as_raw_fd()), stderr: Some(null.as_raw_fd()) };
    let confinement = Confinement {
        process: &plan.process,
        deny_setgroups: plan.deny_setgroups,
        last_cap: plan.last_cap,
        seccomp: plan.seccomp.as_ref(),
    };
    let pid_ns = match mode {
        WarmMode::Fork => PidNs::Own,
        WarmMode::Session => PidNs::Sandbox,
    };
    let j = Join {
        namespaces: ns,
        confinement,
        workdir: plan.workdir_c.as_c_str(),
        stdio,
        cgroup: leaf.map(|l| l as &dyn CgroupJoin),
        pid_ns,
    };
    let joined = join::spawn(j).map_err(|e| warm_err(format!("starting the warm interpreter: {e}")))?;
    drop(theirs);
    drop(null);
    let sent = nix::sys::socket::send(
        mine.as_raw_fd(),
        crate::warm::SHIM.as_bytes(),
        nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
    )
    .map(|_| ())
    .map_err(crate::warm::WarmError::Socket);
    match sent.and_then(|()| crate::warm::await_ready(mine.as_fd(), mode)) {
        Ok(()) => Ok(WarmProc { pidfd: joined.pidfd, ctl: mine }),
        Err(e) => {
            // A setup step of the shim's process may have said more.
            let step = step_failure(&joined.chan, &plan.process);
            let _ = pidfd_send_signal(joined.pidfd.as_fd(), libc::SIGKILL);
            let _ = wait_pidfd(joined.pidfd.as_fd());
            Err(step.unwrap_or_else(|| warm_err(e)))
        }
    }
}

/// A failed step the shim's process reported before it ended, if any.
fn step_failure(chan: &Channel, process: &crate::plan::ProcessPlan) -> Option<ErrorReport> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    loop {
        let mut fds = [PollFd::new(chan.fd(), PollFlags::POLLIN)];
        if !matches!(poll(&mut fds, PollTimeout::from(100u8)), Ok(n) if n > 0) {
            return None;
        }
        match chan.recv() {
            Ok(Some(Msg::Failed(e))) => return Some(describe(process, &e)),
            Ok(Some(_)) => continue,
            _ => return None,
        }
    }
}

/// One `husk exec --code` call through the shim's control socket `ctl`;
/// with the verdict's `warm` (how the interpreter took it).
pub fn call(
    plan: &ExecPlan,
    at: Attached<'_>,
    ctl: OwnedFd,
    mode: WarmMode,
    code: &[u8],
) -> Result<(Executed, serde_json::Value), ErrorReport> {
    let Attached { cgroup, limits, leaf, tap, .. } = at;
    let t_cg = now_ns();
    let (exec_id, leaf) = super::exec::exec_leaf(cgroup, leaf)?;
    let cgroup_setup = ms(t_cg, now_ns());
    let failed = |e: ErrorReport| {
        let mut o = Outcome::setup_failed(e);
        o.duration_ms = ms(plan.t_start, now_ns());
        o
    };
    let mut warm = serde_json::Value::Null;
    let leaf_name = leaf.as_ref().map(|_| format!("exec-{exec_id}"));
    let call = Call { plan, ctl: ctl.as_fd(), mode, code, tap, leaf_name: leaf_name.as_deref() };
    let outcome = match call.run(leaf.as_ref()) {
        Ok((mut o, t_end, w, session)) => {
            warm = w;
            let has_leaf = leaf.is_some();
            if let (Some(l), Some(tree)) = (&leaf, cgroup) {
                end_of_call(tree, l, session);
            }
            let report = leaf.map(|l| {
                let r = CgroupReport { limits: Default::default(), usage: l.usage(), cleanup: None };
                (r, cgroup_setup, ms(t_end, now_ns()))
            });
            add_cgroup(&mut o, report);
            if has_leaf {
                let mut limits = limits.cloned();
                if let (Some(AppliedLimits::Cgroup(l)), Some(tree)) = (&mut limits, cgroup) {
                    let name = format!("exec-{exec_id}");
                    l.cgroup.paths = tree.dirs.iter().map(|d| d.path.join(&name).display().to_string()).collect();
                    // Not cloned into it: forked by the interpreter, then
                    // moved (ahead by the supervisor, or by husk exec).
                    l.cgroup.membership = "moved".into();
                }
                o.limits = limits;
            }
            o.duration_ms = ms(plan.t_start, now_ns());
            o
        }
        Err(e) => failed(e),
    };
    Ok((Executed { exec_id, outcome, backend: "native" }, warm))
}

/// Nothing of a call outlives it (docs/warm.md, What a call leaves): a
/// daemon it started, a fork bomb's children, go with its leaf now, not
/// into the next call. A session (`session`: its process, alive) stays in
/// the call's leaf until the next call moves it into its own (one cgroup
/// move per call, not two); only when the call left something does it go
/// back to its own leaf (`warm`) first, so the kill spares it.
fn end_of_call(tree: &crate::cgroup::nested::Tree, leaf: &Leaf, session: Option<nix::unistd::Pid>) {
    let stays = session.map(|p| p.as_raw());
    let members = leaf.members();
    if members.iter().all(|p| Some(*p) == stays) {
        return;
    }
    if let Some(pid) = session.filter(|p| members.contains(&p.as_raw())) {
        match tree.open_leaf("warm").map(|home| home.adopt(pid)) {
            Ok(Ok(())) => {}
            // Left in the leaf, the session would go with the kill: a
            // restart (fresh state) rather than leftovers in the next call.
            Ok(Err(e)) | Err(e) => crate::errln!("husk: warning: moving the session out of the call's leaf: {e}"),
        }
    }
    leaf.kill_all();
    // Until they are gone: the pids they hold are the next call's (a
    // zygote that cannot fork cannot take it).
    let until = std::time::Instant::now() + LEFTOVERS_LIMIT;
    while !leaf.members().is_empty() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
}

struct Call<'a> {
    plan: &'a ExecPlan,
    ctl: BorrowedFd<'a>,
    mode: WarmMode,
    code: &'a [u8],
    tap: Option<&'a crate::stream::Tap>,
    /// The exec's leaf, by name (the shim's spare is for it alone).
    leaf_name: Option<&'a str>,
}

impl Call<'_> {
    /// The call, watched; the outcome and when the watch ended.
    /// The call, watched: the outcome, when the watch ended, the
    /// verdict's `warm`, and a session's process that lives on (in the
    /// call's leaf).
    fn run(
        &self,
        leaf: Option<&Leaf>,
    ) -> Result<(Outcome, u64, serde_json::Value, Option<nix::unistd::Pid>), ErrorReport> {
        let errno_err = |what: &str, e: nix::errno::Errno| warm_err(format!("{what}: {e}")).with_errno(Some(e));
        let signals = signal_fd(false).map_err(|e| errno_err("signals", e))?;
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
        let (out, err) = match self.plan.capture {
            Some(_) => match (pipe(), pipe()) {
                (Ok(o), Ok(e)) => (Some(o), Some(e)),
                (Err(e), _) | (_, Err(e)) => return Err(errno_err("stdio pipes", e)),
            },
            None => (None, None),
        };
        let null = nix::fcntl::open(
            c"/dev/null",
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| errno_err("/dev/null", e))?;
        // Without capture the call writes where husk exec does.
        let (own_out, own_err) = (std::io::stdout(), std::io::stderr());
        let stdout = out.as_ref().map(|(_, w)| w.as_fd()).unwrap_or_else(|| own_out.as_fd());
        let stderr = err.as_ref().map(|(_, w)| w.as_fd()).unwrap_or_else(|| own_err.as_fd());
        let (status, theirs) = Channel::pair().map_err(|e| errno_err("status channel", e))?;
        let timeout = self.plan.timeout;
        let session = self.mode == WarmMode::Session;
        let head =
            crate::warm::CallHead::new(self.plan.process.envp.iter(), &self.plan.workdir, timeout.filter(|_| session));
        let req = crate::warm::request(&head, self.code).map_err(|e| errno_err("the call's request", e))?;
        let results = crate::warm::results_fd().map_err(|e| errno_err("the call's results", e))?;
        let t_send = now_ns();
        let stdio = [null.as_fd(), stdout, stderr];
        crate::warm::send_call(self.ctl, self.leaf_name, &req, stdio, theirs.fd(), results.as_fd()).map_err(|e| {
            warm_err(format!("the warm interpreter is gone ({e}); the supervisor restarts it, try again"))
                .with_errno(Some(e))
        })?;
        drop((theirs, req, null));
        let pidfd = self.answer(&status)?;
        let mut preforked = false;
        // Into the exec's cgroup before it runs anything of the call: a
        // spare the supervisor placed in this leaf ahead is there already;
        // any other process is moved now. A session (python) or its shell
        // (bash) runs each call in the call's leaf too, so what the call
        // forks is born there (its accounting, its kill): it is moved here
        // now, by this exec only. (Placing it ahead, as a zygote's spare,
        // raced: the supervisor's move of it into the next leaf could land
        // during a call that got another leaf.)
        let pid = pid_of(&pidfd).map(nix::unistd::Pid::from_raw);
        if let Some(l) = leaf {
            let pid = pid.ok_or_else(|| warm_err("the call's process is gone"))?;
            preforked = l.holds(pid);
            if !preforked && let Err(e) = l.adopt(pid) {
                // A fork mode child is the call's alone; a session is not
                // (without Release it skips the call).
                if !session {
                    let _ = pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                }
                return Err(ErrorReport::new(Phase::Cgroup, e.to_string()).with_errno(e.errno()));
            }
        }
        status.send(Msg::Release).map_err(|e| errno_err("releasing the call", e))?;
        let limit = self.plan.capture.unwrap_or(0);
        let stdout = out.map(|(r, _w)| (r, limit));
        let stderr = err.map(|(r, _w)| (r, limit));
        let session_kill = SessionKill { sid: pid_of(&pidfd).unwrap_or(0), pidfd: &pidfd };
        // A session past its backstop goes with its call's leaf (and is
        // restarted by the supervisor).
        let group: Option<&dyn GroupKill> = match (session, leaf) {
            (_, Some(l)) => Some(l),
            (true, None) => None,
            (false, None) => Some(&session_kill),
        };
        let watched = Watch {
            pidfd: &pidfd,
            chan: &status,
            signals: &signals,
            stdout,
            stderr,
            timeout: if session { timeout.map(|t| t + SESSION_BACKSTOP) } else { timeout },
            kill_grace: self.plan.kill_grace,
            group,
            seccomp: None,
            stop: None,
            tap: self.tap,
            tty: None,
            status: StatusFrom::Channel,
        }
        .run();
        let t_end = now_ns();
        // No status on the channel, only its end: whoever reports the
        // call's end is gone (a zygote, the init of the call's pid
        // namespace, or the session itself). The supervisor restarts it.
        let interpreter_died = watched.command.is_none() && watched.failed.is_none();
        // (A bash session's shell that the shim restarted is gone, and its
        // successor is in the session's own leaf.)
        let lives_on = pid.filter(|_| session && !interpreter_died && pidfd_alive(&pidfd));
        let mut phases = BTreeMap::new();
        phases.insert("plan", ms(self.plan.t_start, t_send));
        phases.insert("run", ms(t_send, watched.t_exit.max(t_send)));
        let status_of = watched.init.ok_or_else(|| ErrorReport::new(Phase::Wait, "the call's status is unknown"));
        let interrupted = watched.call_interrupted;
        let killed = watched.timed_out && interrupted.is_none();
        let ended = Ended { command: watched.init, status: status_of, seccomp: None };
        let mut o = ended.outcome(watched, phases, |e| describe(&self.plan.process, e));
        // The call ran under the filter its interpreter was started with
        // (not "unconfined", which is what no filter of its own would say).
        o.seccomp = Some(crate::seccomp::SeccompReport::inherited(self.plan.seccomp.as_ref(), o.signal));
        // How the interpreter took the call, for the verdict's `warm`.
        use crate::warm::RestartCause;
        let restart = match interrupted {
            // bash: its shell killed at the timeout, or ended by `exit`.
            Some(1) => Some(RestartCause::Timeout),
            Some(2) => Some(RestartCause::Exited),
            _ if session && killed => Some(RestartCause::Timeout),
            // Refined from the sandbox's events (`warm::attribute`).
            _ if interpreter_died => Some(RestartCause::Killed),
            _ => None,
        };
        let mut warm = crate::warm::verdict(
            if session { "session" } else { "fork" },
            interrupted.is_some_and(|r| r != 2) || (session && killed),
            restart,
            preforked,
        );
        // The call's results, read once it ended, as much as its output
        // may hold (its own bytes, like its stdout).
        let limit = self.plan.capture.unwrap_or(crate::spec::DEFAULT_OUTPUT_LIMIT);
        crate::warm::put_results(&mut warm, crate::warm::read_results(&results, limit));
        Ok((o, t_end, warm, lives_on))
    }

    /// The shim's first answer: the pidfd of the process that runs the call.
    fn answer(&self, status: &Channel) -> Result<OwnedFd, ErrorReport> {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [PollFd::new(status.fd(), PollFlags::POLLIN)];
        let t = PollTimeout::try_from(ANSWER_LIMIT.as_millis() as u64).unwrap_or(PollTimeout::MAX);
        if !matches!(poll(&mut fds, t), Ok(n) if n > 0) {
            return Err(warm_err(format!(
                "the warm interpreter did not take the call within {}s",
                ANSWER_LIMIT.as_secs()
            )));
        }
        match status.recv_with_fd() {
            Ok(Some((Msg::Joined, Some(pidfd)))) => Ok(pidfd),
            _ => Err(warm_err("the warm interpreter ended the call before it started")),
        }
    }
}

/// Whether the process behind `pidfd` still runs (a pidfd turns readable
/// when it exits).
fn pidfd_alive(pidfd: &OwnedFd) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
}
