//! An exec whose client went away is cancelled.
//!
//! The exec runs in the connection's process, whose one thread is inside
//! the exec's watch (`supervise::Watch`) until the command ends: nothing in
//! it reads the client's socket meanwhile. So a small process forked before
//! the exec (`Watcher`) waits for the socket's hang-up and then interrupts
//! the connection's process the way a terminal would interrupt `husk exec`:
//! SIGTERM (forwarded to the command, which may end cleanly), and if the
//! exec is still running `GRACE` later, SIGINT (the watch's second
//! interrupt kills the exec's processes outright). The forwarded signals are
//! blocked before the watcher starts, so one that arrives before the watch
//! has its signalfd stays pending for it instead of killing the process.
//!
//! A client that half-closes its socket after sending the request (`nc -N`)
//! is taken as gone too, as nginx takes it: over one request per
//! connection, nothing distinguishes it from a client that closed it.

use crate::serve::server::Conn;
use crate::sys::process::{Forked, SingleThreaded};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// Between the SIGTERM the command may handle and the kill.
const GRACE: Duration = Duration::from_secs(2);

/// The watching process; stopped (killed and reaped) on drop.
pub struct Watcher {
    pid: Pid,
    /// The watcher sees EOF on its end when this process is gone, however it
    /// ended.
    _alive: OwnedFd,
}

impl Watcher {
    /// Starts watching `conn` for the client's hang-up. None when it cannot
    /// (the exec then runs unwatched, as it did before there was a watcher).
    pub fn start(conn: &Conn) -> Option<Watcher> {
        crate::sys::signal::block(&crate::supervise::forwarded_signals()).ok()?;
        let (rx, tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        let one = SingleThreaded::check().ok()?;
        let parent = nix::unistd::getpid();
        match crate::sys::process::fork(&one).ok()? {
            Forked::Child(_) => {
                drop(tx);
                watch(conn.fd(), rx.as_fd(), parent);
                crate::sys::process::exit_now(0)
            }
            Forked::Parent { pid, .. } => Some(Watcher { pid, _alive: tx }),
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

/// In the watcher: until the client hangs up or the parent is gone. The
/// hang-up is seen as the end of the socket's input (POLLIN, then a read
/// of 0 bytes) or an error: the request was read whole before the exec, so
/// any byte still arriving is past it and dropped.
fn watch(client: BorrowedFd<'_>, parent_alive: BorrowedFd<'_>, parent: Pid) {
    let mut sink = [0u8; 4096];
    loop {
        let mut fds = [PollFd::new(client, PollFlags::POLLIN), PollFd::new(parent_alive, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
            Ok(_) => {}
        }
        if fds[1].any() != Some(false) {
            return;
        }
        if fds[0].any() == Some(true) {
            use nix::sys::socket::{MsgFlags, recv};
            match recv(client.as_raw_fd(), &mut sink, MsgFlags::MSG_DONTWAIT) {
                Ok(0) => break,
                Ok(_) | Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
    }
    if nix::sys::signal::kill(parent, Signal::SIGTERM).is_err() {
        return;
    }
    let mut fds = [PollFd::new(parent_alive, PollFlags::POLLIN)];
    let grace = PollTimeout::try_from(GRACE.as_millis() as u64).unwrap_or(PollTimeout::MAX);
    if matches!(poll(&mut fds, grace), Ok(0)) {
        let _ = nix::sys::signal::kill(parent, Signal::SIGINT);
    }
}
