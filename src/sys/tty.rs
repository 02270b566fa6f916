//! Terminal ioctls nix does not wrap safely: the pty master's peer, its
//! lock, the controlling terminal, the window size. None allocates.

use super::{SysResult, check};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// A terminal's size (rows, columns; pixels as the terminal reports them).
pub type Winsize = libc::winsize;

/// TIOCGPTPEER (Linux 4.13): opens the slave of the pty whose master is
/// `master`, without a path lookup (so nothing in /dev/pts can be swapped
/// in between). Fails (ENOTTY/EINVAL) on anything that is not a pty master.
pub fn open_peer(master: BorrowedFd<'_>) -> SysResult<OwnedFd> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes an int of open flags by value and returns a
    // new fd, which nothing else owns.
    let fd = check(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) } as libc::c_long)?;
    Ok(super::fd::owned(fd))
}

/// unlockpt(3): TIOCSPTLCK with 0, so the slave can be opened.
pub fn unlock(master: BorrowedFd<'_>) -> SysResult<()> {
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int through the pointer, which lives
    // across the call.
    check(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } as libc::c_long).map(|_| ())
}

/// TIOCSCTTY: `tty` becomes the calling session leader's controlling
/// terminal (never stolen from another session: the argument is 0).
pub fn set_controlling(tty: BorrowedFd<'_>) -> SysResult<()> {
    // SAFETY: TIOCSCTTY takes an int by value.
    check(unsafe { libc::ioctl(tty.as_raw_fd(), libc::TIOCSCTTY, 0 as libc::c_int) } as libc::c_long).map(|_| ())
}

/// TIOCGWINSZ.
pub fn window_size(tty: BorrowedFd<'_>) -> SysResult<Winsize> {
    let mut ws = Winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: the kernel writes one struct winsize into `ws`, which lives
    // across the call.
    check(unsafe { libc::ioctl(tty.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) } as libc::c_long)?;
    Ok(ws)
}

/// TIOCSWINSZ: on a pty master, the kernel also sends SIGWINCH to the
/// slave's foreground process group when the size changed.
pub fn set_window_size(tty: BorrowedFd<'_>, ws: &Winsize) -> SysResult<()> {
    // SAFETY: the kernel reads one struct winsize through the pointer,
    // which lives across the call.
    check(unsafe { libc::ioctl(tty.as_raw_fd(), libc::TIOCSWINSZ, ws as *const Winsize) } as libc::c_long).map(|_| ())
}

/// TIOCGPTN: the number of the pty whose master is `master` (its slave is
/// /dev/pts/N): for kernels without TIOCGPTPEER (gVisor 2022-12).
pub fn pty_number(master: BorrowedFd<'_>) -> SysResult<u32> {
    let mut n: libc::c_uint = 0;
    // SAFETY: the kernel writes one unsigned int into `n`, which lives
    // across the call.
    check(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut n) } as libc::c_long)?;
    Ok(n)
}
