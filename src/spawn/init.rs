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

/// Reaps every zombie left; true when no child is left at all. The init
/// is the reaper of every orphan of its pid namespace, so once the command
/// is gone, "no child" means no other process of the sandbox is alive (an
/// outsider who setns'd into it is not the sandbox's, and still dies with
/// the namespace).
fn reap_the_rest() -> bool {
    loop {
        match reap_any_nohang() {
            Ok(Some(_)) => continue,
            Ok(None) => return false,
            Err(e) => return e == nix::errno::Errno::ECHILD,
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
                    let at = crate::spawn::now_ns();
                    let alone = reap_the_rest();
                    if alone {
                        // No writer of the command's output is left but us
                        // (stdio, and the capture pipes' ends we were given
                        // before they were dup'ed there): the parent's reads
                        // of it end now, not at our exit. We leave by
                        // `exit_now`, so nothing closed here is dropped.
                        for fd in 0..3 {
                            let _ = nix::unistd::close(fd);
                        }
                        let _ = crate::sys::fd::close_all_except(&[std::os::fd::AsRawFd::as_raw_fd(&chan.fd())]);
                    }
                    let _ = chan.send(Msg::Reaped { at });
                    let _ = chan.send(msg);
                    if alone && chan.send(Msg::Alone).is_ok() {
                        // Idle until the parent has read the sandbox's
                        // counters: our exit (the namespaces' teardown) is
                        // then in none of them, and the parent need not
                        // wait for it (`backend::native::teardown`).
                        let _ = chan.recv();
                    }
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
