//! The caller's terminal: raw mode while a `-t` command runs, and its size.

use crate::sys::tty::Winsize;
use nix::sys::termios::{SetArg, Termios, cfmakeraw, tcgetattr, tcsetattr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// husk's terminal in raw mode: every key (Ctrl-C, Ctrl-Z, Ctrl-\ too)
/// reaches the sandbox's terminal as a byte, and its line discipline, not
/// the host's, turns it into a signal for the sandbox's foreground job.
/// The settings found are restored when the guard drops, which the watch
/// does on every way out (the command's end, a timeout, a forwarded
/// signal's kill, a failed setup, a panic's unwinding).
pub struct RawMode {
    fd: OwnedFd,
    saved: Termios,
}

impl RawMode {
    /// Raw mode on `tty` (husk's stdin); None when it is not a terminal.
    pub fn enter(tty: BorrowedFd<'_>) -> Option<RawMode> {
        let saved = tcgetattr(tty).ok()?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        // A private copy of the fd: the guard must restore the very
        // terminal it changed, whatever becomes of fd 0.
        let fd = tty.try_clone_to_owned().ok()?;
        tcsetattr(&fd, SetArg::TCSADRAIN, &raw).ok()?;
        Some(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // TCSANOW, not TCSADRAIN: a terminal that stopped taking output
        // must not keep husk from ending.
        let _ = tcsetattr(&self.fd, SetArg::TCSANOW, &self.saved);
    }
}

/// The size of the first of `fds` that is a terminal with a size.
pub fn size_of_any<'a>(fds: impl IntoIterator<Item = BorrowedFd<'a>>) -> Option<Winsize> {
    fds.into_iter()
        .find_map(|fd| crate::sys::tty::window_size(fd.as_fd()).ok())
        .filter(|w| w.ws_row > 0 && w.ws_col > 0)
}
