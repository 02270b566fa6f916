//! The command's process (pid 2): confinement steps in the order the kernel
//! requires, then the seccomp filter, then execve. Seccomp goes last so the
//! filter also covers the execve itself, and after no_new_privs, which
//! loading a filter without CAP_SYS_ADMIN requires.

use super::{fail, now_ns, phase};
use crate::plan::{Plan, ProcessPlan};
use crate::step::{AtStep, Step, StepError};
use crate::sync::{Channel, MAX_TIMES, Msg};
use crate::sys::Errno;
use crate::sys::fd::{CloseRange, close_from};
use crate::sys::process::{execve, exit_now};
use nix::sys::prctl;
use nix::sys::signal::SigSet;
use nix::sys::stat::{Mode, umask};
use nix::unistd::{Gid, Uid};
use std::os::fd::{AsFd, OwnedFd};

type R<T> = Result<T, StepError>;

/// What confines one command: its process plan, the two sandbox facts the
/// steps need, and the seccomp program. `run`'s command and every
/// `husk exec` go through the same steps with it.
pub struct Confinement<'a> {
    pub process: &'a ProcessPlan,
    /// Rootless sandboxes cannot call setgroups.
    pub deny_setgroups: bool,
    pub last_cap: u32,
    pub seccomp: Option<&'a crate::seccomp::Program>,
}

impl<'a> Confinement<'a> {
    pub fn of(plan: &'a Plan) -> Self {
        Confinement {
            process: &plan.process,
            deny_setgroups: plan.ids.deny_setgroups,
            last_cap: plan.last_cap,
            seccomp: plan.seccomp.as_ref(),
        }
    }
}

pub fn run(plan: &Plan, chan: &Channel, times: &mut [u64; MAX_TIMES], gate: OwnedFd) -> ! {
    let c = Confinement::of(plan);
    if let Err(e) = confine(&c, chan) {
        fail(chan, e);
    }
    // Wait until the init has dropped its own privileges (see child.rs).
    wait_gate(gate);
    times[phase::CONFINED] = now_ns();
    finish(&c, chan, times)
}

/// The last steps: the seccomp filter, the timestamps, execve. Never
/// returns; an exec failure is reported over `chan`.
pub fn finish(c: &Confinement<'_>, chan: &Channel, times: &mut [u64; MAX_TIMES]) -> ! {
    // Last, so the filter also covers execve and nothing of husk's own
    // setup has to be allowed by the profile.
    if let Some(seccomp) = c.seccomp
        && let Err(e) = seccomp.apply(chan)
    {
        fail(chan, e);
    }
    times[phase::SECCOMP] = now_ns();
    let _ = chan.send(Msg::Times(*times));
    let errno = exec(c.process);
    // exec failed: 127 when nothing was found, 126 when found but not runnable.
    fail_exec(chan, errno)
}

/// setsid, identity, capabilities, the terminal (`-t`), rlimits, umask,
/// signals, no_new_privs, fds marked close-on-exec: everything but the
/// filter and execve. `chan` goes to whoever the parent-death signal (if
/// armed) is tied to.
pub fn confine(c: &Confinement<'_>, chan: &Channel) -> R<()> {
    // A new session: no controlling terminal of the host, so TIOCSTI on an
    // inherited tty fd is refused (CVE-2017-5226).
    nix::unistd::setsid().at(Step::Setsid)?;
    let p = c.process;
    // The bounding set already holds at most caps_keep (the init or the
    // exec joiner shrank it).
    set_identity(c, chan)?;
    crate::sys::caps::set_process_caps(p.caps_keep, c.last_cap).at(Step::DropCaps)?;
    // As the command's user (the slave is its own, as after a login) and
    // before --rlimit nofile could leave no fd for it. The session is new
    // and has no terminal yet, so the slave becomes its controlling one.
    if p.tty {
        let slave = crate::tty::pty::open_and_hand_out(chan)?;
        if let Some(ws) = &p.winsize {
            crate::sys::tty::set_window_size(slave.as_fd(), ws).at(Step::ControllingTty)?;
        }
        crate::tty::pty::make_controlling(slave)?;
    }
    for r in &p.rlimits {
        crate::sys::process::set_rlimit(r.resource, r.soft, r.hard).at(Step::Rlimits)?;
    }
    umask(Mode::from_bits_truncate(0o022));
    reset_signals()?;
    prctl::set_no_new_privs().at(Step::NoNewPrivs)?;
    // Every inherited fd above stderr is closed by execve; the sync channel
    // stays usable until then to report an exec failure.
    close_from(3, CloseRange::Cloexec).at(Step::CloseFds)?;
    Ok(())
}

/// The command starts as under a shell: default dispositions and no signal
/// blocked (the init blocked the ones it forwards before forking it).
/// `sys::signal::set_mask`, not nix's `thread_set_mask`, which cannot
/// report a failure.
pub(super) fn reset_signals() -> R<()> {
    crate::sys::signal::reset_dispositions().at(Step::ResetSignals)?;
    crate::sys::signal::set_mask(&SigSet::empty()).at(Step::ResetSignals)
}

fn set_identity(c: &Confinement<'_>, chan: &Channel) -> R<()> {
    let p = c.process;
    let pdeathsig = prctl::get_pdeathsig().at(Step::SetIdentity)?;
    if !c.deny_setgroups {
        let groups: Vec<Gid> = p.groups.iter().map(|g| Gid::from_raw(*g)).collect();
        nix::unistd::setgroups(&groups).at(Step::SetIdentity)?;
    }
    let (uid, gid) = (Uid::from_raw(p.uid), Gid::from_raw(p.gid));
    nix::unistd::setresgid(gid, gid, gid).at(Step::SetIdentity)?;
    if p.caps_keep != 0 {
        crate::sys::caps::set_keepcaps(true).at(Step::SetIdentity)?;
    }
    nix::unistd::setresuid(uid, uid, uid).at(Step::SetIdentity)?;
    rearm_after_id_switch(chan, pdeathsig, Step::SetIdentity)
}

/// Changing ids clears the parent-death signal and resets dumpability to
/// `fs.suid_dumpable` (the kernel's commit_creds): re-arm both after every
/// switch, or a process meant to die with its parent (`husk exec`'s command)
/// outlives it, and one meant to be unptraceable becomes traceable. When a
/// death signal was armed and the parent died in the window without one,
/// leave now: `chan`'s other end is the parent's.
pub(crate) fn rearm_after_id_switch(chan: &Channel, pdeathsig: Option<nix::sys::signal::Signal>, step: Step) -> R<()> {
    prctl::set_dumpable(false).at(step)?;
    if let Some(sig) = pdeathsig {
        prctl::set_pdeathsig(sig).at(step)?;
        if chan.peer_gone() {
            exit_now(125);
        }
    }
    Ok(())
}

/// execvp semantics over the pre-resolved candidates.
fn exec(p: &ProcessPlan) -> Errno {
    let mut saw_eacces = false;
    let mut last = Errno::ENOENT;
    for path in &p.candidates {
        let e = execve(path, &p.argv, &p.envp);
        match e {
            Errno::ENOENT | Errno::ENOTDIR => {}
            Errno::EACCES => saw_eacces = true,
            other => return other,
        }
        last = e;
    }
    if saw_eacces { Errno::EACCES } else { last }
}

fn fail_exec(chan: &Channel, errno: Errno) -> ! {
    let _ = chan.send(Msg::Failed(StepError::new(Step::Exec, errno)));
    exit_now(if errno == Errno::ENOENT { 127 } else { 126 })
}

/// Blocks until the gate's one byte arrives; EOF instead (whoever held the
/// other end failed or died) ends this process: nothing of the command may
/// run unless released.
pub(crate) fn wait_gate(gate: OwnedFd) {
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(&gate, &mut byte) {
            Ok(1) => return,
            Err(Errno::EINTR) => continue,
            _ => exit_now(125),
        }
    }
}
