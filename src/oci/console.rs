//! The container side of `--console-socket` (create with process.terminal,
//! exec -t): a pty made from the container's own /dev/pts/ptmx, so its slave
//! lives in the container's devpts instance and the name the process sees
//! (/dev/pts/N) is one it can open. The master goes to the caller's socket
//! over SCM_RIGHTS (what go-runc's ReceiveMaster expects: one fd, any
//! payload); the slave becomes stdio and the controlling terminal of a new
//! session. Neither end stays open in the calling process: the shim sees
//! EOF on the master once the container's process and its children exit.

use crate::step::{AtStep, Step, StepError};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// Runs in the process that will exec the container's command, after it
/// entered the container's mount namespace (and root).
pub fn attach(sock: OwnedFd) -> Result<(), StepError> {
    let step = Step::OpenPty;
    // The devpts instance's own ptmx, checked to be one (CVE-2025-52565):
    // the slave comes from it by TIOCGPTPEER, never by a path.
    let master = super::verify::ptmx().at(step)?;
    crate::sys::tty::unlock(master.as_fd()).at(step)?;
    let slave = crate::sys::tty::open_peer(master.as_fd()).at(step)?;
    crate::sys::socket::send_with_fd(sock.as_fd(), b"/dev/ptmx", master.as_fd()).at(Step::ConsoleSocket)?;
    drop(master);
    drop(sock);
    nix::unistd::setsid().at(Step::Setsid)?;
    crate::sys::tty::set_controlling(slave.as_fd()).at(Step::ControllingTty)?;
    for fd in 0..3 {
        crate::sys::fd::dup_onto(slave.as_raw_fd(), fd).at(Step::RedirectStdio)?;
    }
    Ok(())
}

/// Whether a process gets a terminal, from its `terminal` (or `exec -t`)
/// and the socket that must receive the master: one without the other is
/// refused, as runc refuses it, rather than running without the pty the
/// caller waits for (or with a socket nobody sends to).
pub fn wanted(terminal: bool, socket: bool) -> Result<bool, &'static str> {
    match (terminal, socket) {
        (true, true) => Ok(true),
        (false, false) => Ok(false),
        (true, false) => Err("a terminal was asked for (process.terminal / -t) but no --console-socket was given"),
        (false, true) => Err("--console-socket given but no terminal was asked for (process.terminal / -t)"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_terminal_needs_a_socket_and_a_socket_needs_a_terminal() {
        assert_eq!(super::wanted(true, true), Ok(true));
        assert_eq!(super::wanted(false, false), Ok(false));
        assert!(super::wanted(true, false).is_err());
        assert!(super::wanted(false, true).is_err());
    }
}
