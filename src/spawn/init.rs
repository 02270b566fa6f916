//! The sandbox init's life after setup: reap every zombie, forward signals
//! to the command, report the command's end to husk, then exit (which makes
//! the kernel kill everything left in the pid namespace).

use crate::sync::{Channel, Msg};
use crate::sys::process::{ExitStatus, decode_wait_status, exit_now, reap_any_nohang};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::unistd::Pid;

/// Signals the init forwards to the command (and SIGCHLD, which it handles).
pub fn init_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGWINCH,
    ] {
        set.add(s);
    }
    set
}

/// A held sandbox's init (`husk create`): no command of its own. It reaps
/// what is reparented to it (the orphans of execs) and ignores every other
/// signal (the sandbox cannot stop its own init), until its supervisor kills
/// it or dies (PDEATHSIG); its end ends every process of the sandbox.
pub fn hold() -> ! {
    let set = init_signals();
    loop {
        if set.wait() == Ok(Signal::SIGCHLD) {
            while let Ok(Some(_)) = reap_any_nohang() {}
        }
    }
}

pub fn reap(cmd: Pid, chan: &Channel) -> ! {
    let set = init_signals();
    loop {
        let Ok(sig) = set.wait() else { continue };
        if sig != Signal::SIGCHLD {
            let _ = kill(cmd, sig);
            continue;
        }
        loop {
            match reap_any_nohang() {
                Ok(Some((pid, status))) if pid == cmd => {
                    let msg = match decode_wait_status(status) {
                        Some(ExitStatus::Exited(code)) => Msg::Exited { code },
                        Some(ExitStatus::Signaled(signal)) => Msg::Signaled { signal },
                        None => continue,
                    };
                    let _ = chan.send(Msg::Reaped { at: crate::spawn::now_ns() });
                    let _ = chan.send(msg);
                    exit_now(0);
                }
                Ok(Some(_)) => continue,
                Ok(None) => break,
                // No children at all: the command is gone without a status.
                Err(_) => exit_now(0),
            }
        }
    }
}
