//! The sandbox init's life after setup: reap every zombie, forward signals
//! to the command, report the command's end to husk, then exit (which makes
//! the kernel kill everything left in the pid namespace).

use super::child::init_signals;
use crate::sync::{Channel, Msg};
use crate::sys::process::{ExitStatus, decode_wait_status, exit_now, reap_any_nohang};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

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
