//! How `husk exec` puts a command into a live sandbox.
//!
//! husk exec forks a short-lived *joiner* (born in the exec's cgroup with
//! CLONE_INTO_CGROUP; v1 hierarchies joined by self-attach first thing),
//! which joins the sandbox's namespaces by fd (handed over by the
//! supervisor; never by path) and clones the command with CLONE_PARENT, so
//! the command is husk exec's own child, watched by pidfd there, while the
//! joiner exits at once. The command then goes through the same steps as
//! `run`'s (spawn::command): setsid, identity, capabilities, rlimits,
//! no_new_privs, fds, the workdir, the seccomp filter last, execve.
//!
//! Why the sandbox can never ptrace or signal anything of husk's before it
//! is confined (the CVE-2016-9962 shape, where runc's exec process joined
//! the container's pid namespace holding host fds, dumpable):
//! - the joiner makes itself non-dumpable *before* the first setns, and the
//!   command is cloned from it afterwards, inheriting that (dumpability is
//!   per mm and copied at fork). A non-dumpable task can be ptraced, and its
//!   /proc/<pid>/{fd,mem,environ,root,cwd} opened, only with CAP_SYS_PTRACE
//!   over its mm's user namespace, which is husk's, not the sandbox's: not
//!   even the sandbox's root has it. The command becomes dumpable again only
//!   by its execve, when every step above is done and its fds are closed.
//! - joining a pid namespace (setns) moves only future children: the
//!   joiner stays in husk's pid namespace, so no process in the sandbox can
//!   name it (no pid there, no /proc entry), and neither husk exec, the
//!   command's parent, which is outside too.
//! - the joiner keeps no fd it does not need (close_range), closes the
//!   namespace fds once joined, and the command's remaining fds (the
//!   sync channel) are close-on-exec.
//! - the bounding set is cut to --cap-add's before the command exists, so
//!   nothing the sandbox can reach ever holds more.

use crate::cgroup::CgroupJoin;
use crate::spawn::command::{Confinement, confine, finish};
use crate::spawn::{ChildStdio, fail, now_ns, phase};
use crate::step::{AtStep, Step, StepError};
use crate::sync::{Channel, MAX_TIMES, Msg};
use crate::sys::Errno;
use crate::sys::process::{
    Forked, SingleThreaded, ThreadsError, clone_legacy, clone_sibling, clone3, exit_now, wait_pidfd,
};
use nix::fcntl::OFlag;
use nix::sys::prctl;
use nix::sys::signal::Signal;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

/// Everything the joiner and the command need, built before the fork.
pub struct Join<'a> {
    /// The sandbox's namespaces (CLONE_NEW* flag, fd), in join order.
    pub namespaces: Vec<(libc::c_int, OwnedFd)>,
    pub confinement: Confinement<'a>,
    pub workdir: &'a CStr,
    pub stdio: ChildStdio,
    pub cgroup: Option<&'a dyn CgroupJoin>,
    pub pid_ns: PidNs,
}

/// Which pid namespace the command lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PidNs {
    /// The sandbox's, as every exec's command.
    Sandbox,
    /// A new one nested in the sandbox's, whose init the command is (a warm
    /// interpreter, docs/warm.md): what it forks can neither name it nor
    /// kill it (the kernel drops SIGKILL and SIGSTOP sent to a pid
    /// namespace's init from inside it). A small waiter stays between it
    /// and husk: the kernel makes a new pid namespace only for the
    /// children of whoever unshared it.
    Own,
}

/// The command, started and released.
pub struct Joined {
    pub pidfd: OwnedFd,
    pub chan: Channel,
    /// Monotonic ns just before the joiner's clone.
    pub t_clone: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("starting the joiner (clone3): {0}")]
    Clone(Errno),
    #[error("sync channel: {0}")]
    Channel(Errno),
    #[error("attaching the joiner to the exec's cgroup: {0}")]
    Cgroup(crate::cgroup::CgroupError),
    #[error("joining the sandbox failed at {}: {:?} ({})", .0.step.name(), .0.errno, .0.errno.desc())]
    Step(StepError),
    #[error("the joiner ended without starting the command")]
    Vanished,
    #[error("before starting the joiner: {0}")]
    Threads(#[from] ThreadsError),
}

/// Starts the command inside the sandbox; returns once it runs (its own
/// steps may still fail: the watch reads that from the channel).
pub fn spawn(j: Join<'_>) -> Result<Joined, JoinError> {
    let one = SingleThreaded::check()?;
    let (parent_end, child_end) = Channel::pair().map_err(JoinError::Channel)?;
    let t_clone = now_ns();
    let (forked, born_inside) = fork_toward(&one, j.cgroup).map_err(JoinError::Clone)?;
    match forked {
        Forked::Child(alone) => {
            drop(parent_end);
            joiner(&j, &child_end, born_inside, alone)
        }
        Forked::Parent { pid, pidfd } => {
            drop(child_end);
            let joiner = pidfd.expect("clone asked for a pidfd");
            place(pid, &joiner, born_inside, j.cgroup, &parent_end)?;
            drop(j);
            let first = parent_end.recv_with_fd();
            let _ = wait_pidfd(joiner.as_fd());
            match first {
                Ok(Some((Msg::Joined, Some(pidfd)))) => Ok(Joined { pidfd, chan: parent_end, t_clone }),
                Ok(Some((Msg::Failed(e), _))) => Err(JoinError::Step(e)),
                Ok(_) => Err(JoinError::Vanished),
                Err(e) => Err(JoinError::Channel(e)),
            }
        }
    }
}

/// Forks a process bound for a live sandbox's exec cgroup: born in it
/// (clone3 with CLONE_INTO_CGROUP) where the kernel can, else by the
/// clone(2) fallback, to be attached by its parent (`place`). The bool:
/// born inside.
pub(super) fn fork_toward(one: &SingleThreaded, cgroup: Option<&dyn CgroupJoin>) -> Result<(Forked, bool), Errno> {
    let into = cgroup.and_then(|c| c.clone_into());
    match clone3(one, 0, into) {
        Err(Errno::ENOSYS) | Err(Errno::E2BIG) => clone_legacy(one, 0).map(|f| (f, false)),
        other => other.map(|f| (f, into.is_some())),
    }
}

/// Why `place` failed (the child is killed and reaped by then).
#[derive(Debug)]
pub(super) enum PlaceError {
    Cgroup(crate::cgroup::CgroupError),
    Channel(Errno),
}

impl From<PlaceError> for JoinError {
    fn from(e: PlaceError) -> JoinError {
        match e {
            PlaceError::Cgroup(e) => JoinError::Cgroup(e),
            PlaceError::Channel(e) => JoinError::Channel(e),
        }
    }
}

/// The parent's half of `fork_toward`: only a child of the clone(2)
/// fallback needs attaching, and it waits (`settle`) for the release
/// before it goes on, so nothing of it runs outside the cgroup.
pub(super) fn place(
    pid: nix::unistd::Pid,
    pidfd: &OwnedFd,
    born_inside: bool,
    cgroup: Option<&dyn CgroupJoin>,
    chan: &Channel,
) -> Result<(), PlaceError> {
    let Some(cg) = cgroup.filter(|_| !born_inside) else { return Ok(()) };
    let kill = || {
        let _ = crate::sys::process::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
        let _ = wait_pidfd(pidfd.as_fd());
    };
    if let Err(e) = cg.attach(pid, false) {
        kill();
        return Err(PlaceError::Cgroup(e));
    }
    if let Err(e) = chan.send(Msg::Release) {
        kill();
        return Err(PlaceError::Channel(e));
    }
    Ok(())
}

/// The child's half: joins the v1 hierarchies itself, and waits for the
/// parent's release when it was not born in its cgroup.
pub(super) fn settle(cgroup: Option<&dyn CgroupJoin>, chan: &Channel, born_inside: bool) {
    if let Some(cg) = cgroup
        && let Err(errno) = cg.join_self()
    {
        fail(chan, StepError::new(Step::JoinCgroup, errno));
    }
    if !born_inside && cgroup.is_some() {
        match chan.recv() {
            Ok(Some(Msg::Release)) => {}
            _ => exit_now(125),
        }
    }
}

type R<T> = Result<T, StepError>;

/// The joiner: never returns.
fn joiner(j: &Join<'_>, chan: &Channel, born_inside: bool, one: SingleThreaded) -> ! {
    let mut times = [0u64; MAX_TIMES];
    times[phase::CHILD_START] = now_ns();
    settle(j.cgroup, chan, born_inside);
    match join(j, chan) {
        Ok(gate) => {
            times[phase::NAMESPACES] = now_ns();
            start_command(&one, j, chan, gate, &mut times)
        }
        Err(e) => fail(chan, e),
    }
}

/// Non-dumpable, fds closed, namespaces joined, bounding set cut, stdio in
/// place. Returns the command's start gate (see `start_command`).
fn join(j: &Join<'_>, chan: &Channel) -> R<(OwnedFd, OwnedFd)> {
    // Dies with husk exec, and is never dumpable in the sandbox (see the
    // module comment): both before the first setns.
    prctl::set_pdeathsig(Signal::SIGKILL).at(Step::JoinNamespaces)?;
    if chan.peer_gone() {
        exit_now(125);
    }
    prctl::set_dumpable(false).at(Step::JoinNamespaces)?;
    let mut keep: [RawFd; 12] = [-1; 12];
    let mut n = 0;
    for fd in [Some(chan.fd().as_raw_fd()), j.stdio.stdin, j.stdio.stdout, j.stdio.stderr].into_iter().flatten() {
        keep[n] = fd;
        n += 1;
    }
    for (_, fd) in &j.namespaces {
        keep[n] = fd.as_raw_fd();
        n += 1;
    }
    crate::sys::fd::close_all_except(&keep[..n]).at(Step::CloseFds)?;
    for (flag, fd) in &j.namespaces {
        nix::sched::setns(fd, nix::sched::CloneFlags::from_bits_retain(*flag)).at(Step::JoinNamespaces)?;
    }
    for (_, fd) in &j.namespaces {
        let _ = nix::unistd::close(fd.as_raw_fd());
    }
    // A cgroup namespace of the exec's own, rooted at its leaf: the command
    // sees its cgroup as "/", like `run`'s, instead of "/../exec-<id>"
    // relative to the init's (and learns nothing of the sandbox's layout).
    if j.cgroup.is_some() {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP).at(Step::UnshareCgroupNs)?;
    }
    let c = &j.confinement;
    crate::sys::caps::drop_bounding(crate::sys::caps::all_caps(c.last_cap), c.process.caps_keep).at(Step::DropCaps)?;
    for (fd, target) in [(j.stdio.stdin, 0), (j.stdio.stdout, 1), (j.stdio.stderr, 2)] {
        if let Some(fd) = fd {
            crate::sys::fd::dup_onto(fd, target).at(Step::RedirectStdio)?;
        }
    }
    // Only now: under -t one fd serves all three.
    for fd in [j.stdio.stdin, j.stdio.stdout, j.stdio.stderr].into_iter().flatten() {
        if fd > 2 {
            let _ = nix::unistd::close(fd);
        }
    }
    nix::unistd::pipe2(OFlag::O_CLOEXEC).at(Step::ForkCommand)
}

/// Clones the command (CLONE_PARENT: husk exec's child), hands its pidfd to
/// husk exec, then opens the gate and exits. The command waits at the gate
/// so that `Joined` is always the first message husk exec reads.
fn start_command(
    one: &SingleThreaded,
    j: &Join<'_>,
    chan: &Channel,
    (gate_r, gate_w): (OwnedFd, OwnedFd),
    times: &mut [u64; MAX_TIMES],
) -> ! {
    match clone_sibling(one) {
        Err(e) => fail(chan, StepError::new(Step::ForkCommand, e)),
        Ok(Forked::Child(alone)) => {
            drop(gate_w);
            command(j, chan, gate_r, times, alone)
        }
        Ok(Forked::Parent { pidfd, .. }) => {
            drop(gate_r);
            let pidfd = pidfd.expect("clone asked for a pidfd");
            if chan.send_fd(Msg::Joined, pidfd.as_fd()).is_err() {
                let _ = crate::sys::process::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                exit_now(125);
            }
            let _ = nix::unistd::write(&gate_w, &[1]);
            exit_now(0)
        }
    }
}

/// The command, in the sandbox's namespaces: `run`'s confinement, then the
/// workdir, then the filter and execve.
fn command(j: &Join<'_>, chan: &Channel, gate: OwnedFd, times: &mut [u64; MAX_TIMES], one: SingleThreaded) -> ! {
    crate::spawn::command::wait_gate(gate);
    // Our parent is husk exec now (CLONE_PARENT); PDEATHSIG is not inherited.
    if let Err(e) = prctl::set_pdeathsig(Signal::SIGKILL).at(Step::Setsid) {
        fail(chan, e);
    }
    if chan.peer_gone() {
        exit_now(125);
    }
    if j.pid_ns == PidNs::Own {
        own_pid_ns(chan, one, j.confinement.last_cap);
    }
    if let Err(e) = confine(&j.confinement, chan) {
        fail(chan, e);
    }
    // As the command's user, like a shell's cd: the workdir must be
    // reachable from the sandbox's root (never a path outside it).
    if let Err(e) = nix::unistd::chdir(j.workdir).at(Step::Chdir) {
        fail(chan, e);
    }
    let mut buf = [0u8; libc::PATH_MAX as usize];
    if let Err(e) = crate::sys::fd::getcwd_reachable(&mut buf).at(Step::VerifyCwd) {
        fail(chan, e);
    }
    times[phase::CONFINED] = now_ns();
    finish(&j.confinement, chan, times)
}

/// Makes the rest of the command the init of a new pid namespace (see
/// `PidNs::Own`); returns in that init. This process stays behind as its
/// waiter: no capabilities, never dumpable (the joiner's setting), exiting
/// with the init's status, so husk's pidfd of it still says when and how
/// the command ended.
fn own_pid_ns(chan: &Channel, one: SingleThreaded, last_cap: u32) {
    if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID).at(Step::UnsharePidNs) {
        fail(chan, e);
    }
    match crate::sys::process::fork(&one) {
        Err(e) => fail(chan, StepError::new(Step::UnsharePidNs, e)),
        Ok(Forked::Child(_)) => {
            // The init dies with its waiter, and its namespace with it.
            if let Err(e) = prctl::set_pdeathsig(Signal::SIGKILL).at(Step::UnsharePidNs) {
                fail(chan, e);
            }
            if chan.peer_gone() {
                exit_now(125);
            }
        }
        Ok(Forked::Parent { pid, .. }) => {
            let _ = crate::sys::caps::set_process_caps(0, last_cap);
            // The init reports its own steps; this waiter holds nothing of
            // the channel's (its peer sees EOF once the init execs).
            let _ = nix::unistd::close(chan.fd().as_raw_fd());
            let code = loop {
                match nix::sys::wait::waitpid(pid, None) {
                    Ok(nix::sys::wait::WaitStatus::Exited(_, c)) => break c,
                    Ok(nix::sys::wait::WaitStatus::Signaled(_, s, _)) => break 128 + s as i32,
                    Err(Errno::EINTR) | Ok(_) => continue,
                    Err(_) => break 125,
                }
            };
            exit_now(code)
        }
    }
}
