//! The command's process (pid 2): confinement steps in the order the kernel
//! requires, then the seccomp filter, then execve. Seccomp goes last so the
//! filter also covers the execve itself, and after no_new_privs, which
//! loading a filter without CAP_SYS_ADMIN requires.

use super::step::{AtStep, Step, StepError};
use super::{fail, now_ns, phase};
use crate::plan::Plan;
use crate::sync::{Channel, MAX_TIMES, Msg};
use crate::sys::Errno;
use crate::sys::fd::{CloseRange, close_from};
use crate::sys::process::{execve, exit_now};
use nix::sys::prctl;
use nix::sys::signal::SigSet;
use nix::sys::stat::{Mode, umask};
use nix::unistd::{Gid, Uid};
use std::os::fd::OwnedFd;

type R<T> = Result<T, StepError>;

pub fn run(plan: &Plan, chan: &Channel, times: &mut [u64; MAX_TIMES], gate: OwnedFd) -> ! {
    if let Err(e) = confine(plan) {
        fail(chan, e);
    }
    // Wait until the init has dropped its own privileges (see child.rs).
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(&gate, &mut byte) {
            Ok(1) => break,
            Err(Errno::EINTR) => continue,
            _ => exit_now(125),
        }
    }
    drop(gate);
    times[phase::CONFINED] = now_ns();
    // Last, so the filter also covers execve and nothing of husk's own
    // setup has to be allowed by the profile.
    if let Some(seccomp) = &plan.seccomp
        && let Err(e) = seccomp.apply(chan)
    {
        fail(chan, e);
    }
    times[phase::SECCOMP] = now_ns();
    let _ = chan.send(Msg::Times(*times));
    let errno = exec(plan);
    // exec failed: 127 when nothing was found, 126 when found but not runnable.
    fail_exec(chan, errno)
}

fn confine(plan: &Plan) -> R<()> {
    // A new session: no controlling terminal of the host, so TIOCSTI on an
    // inherited tty fd is refused (CVE-2017-5226).
    nix::unistd::setsid().at(Step::Setsid)?;
    let p = &plan.process;
    // The init already shrank the bounding set to caps_keep.
    set_identity(plan)?;
    crate::sys::caps::set_process_caps(p.caps_keep, plan.last_cap).at(Step::DropCaps)?;
    for r in &p.rlimits {
        crate::sys::process::set_rlimit(r.resource, r.soft, r.hard).at(Step::Rlimits)?;
    }
    umask(Mode::from_bits_truncate(0o022));
    crate::sys::signal::reset_dispositions().at(Step::CloseFds)?;
    SigSet::empty().thread_set_mask().at(Step::CloseFds)?;
    prctl::set_no_new_privs().at(Step::NoNewPrivs)?;
    // Every inherited fd above stderr is closed by execve; the sync channel
    // stays usable until then to report an exec failure.
    close_from(3, CloseRange::Cloexec).at(Step::CloseFds)?;
    Ok(())
}

fn set_identity(plan: &Plan) -> R<()> {
    let p = &plan.process;
    if !plan.ids.deny_setgroups {
        let groups: Vec<Gid> = p.groups.iter().map(|g| Gid::from_raw(*g)).collect();
        nix::unistd::setgroups(&groups).at(Step::SetIdentity)?;
    }
    let (uid, gid) = (Uid::from_raw(p.uid), Gid::from_raw(p.gid));
    nix::unistd::setresgid(gid, gid, gid).at(Step::SetIdentity)?;
    if p.caps_keep != 0 {
        crate::sys::caps::set_keepcaps(true).at(Step::SetIdentity)?;
    }
    nix::unistd::setresuid(uid, uid, uid).at(Step::SetIdentity)
}

/// execvp semantics over the pre-resolved candidates.
fn exec(plan: &Plan) -> Errno {
    let p = &plan.process;
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
