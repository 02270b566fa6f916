//! `-t/--tty`: the command gets a terminal of its own.
//!
//! - `pty`: inside the sandbox, a pty pair from the sandbox's own devpts
//!   instance; the master is handed out (over the sync channel to husk; the
//!   same piece serves any runtime that wants the master, e.g. an OCI
//!   `--console-socket`), the slave becomes the command's controlling
//!   terminal and its stdin, stdout and stderr.
//! - `terminal`: the caller's side: raw mode on husk's own terminal
//!   (restored by a guard on every way out of the watch) and window sizes.
//! - `relay`: what husk's watch does with the master: stdin to the master,
//!   the master to stdout (or into the verdict's capture), window-size
//!   changes (SIGWINCH) to the master.
//!
//! The host's terminal never reaches the sandbox: with -t the sandbox's
//! init and the command start with /dev/null on 0, 1 and 2, and the
//! command's controlling terminal is its own pty (so TIOCSTI can only type
//! into the sandbox's own input).

pub mod pty;
pub mod relay;
pub mod terminal;

use std::os::fd::OwnedFd;

/// /dev/null, opened by husk before the sandbox starts, for the sandbox's
/// stdin, stdout and stderr under `-t` (None without: they are inherited
/// or capture pipes).
pub fn null_stdio(tty: bool) -> Result<Option<OwnedFd>, nix::errno::Errno> {
    if !tty {
        return Ok(None);
    }
    use nix::fcntl::OFlag;
    nix::fcntl::open(c"/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty()).map(Some)
}
