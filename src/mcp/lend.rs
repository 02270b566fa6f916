//! What a library call borrows of this process: fd 0 and the signal mask.
//!
//! An exec's or run's command inherits the stdin of the process that starts it
//! (backend/native/join.rs keeps fd 0), and this server's fd 0 is the
//! client's JSON-RPC stream: a command that read it would eat the next
//! requests. So for the length of one library call fd 0 is the call's own
//! input (a sealed memfd holding the tool's `stdin`, or /dev/null), and
//! the client's stream is put back when the guard drops. One request at a
//! time and one thread (mod.rs): nothing reads fd 0 meanwhile; what the
//! server had already buffered from it stays in its `BufRead`.
//!
//! The watch of an exec or run blocks SIGINT, SIGTERM, SIGHUP and SIGQUIT
//! to read them from a signalfd (supervise.rs) and, made for a process
//! that ends with its command, never unblocks them: the mask is put back
//! too, so the server still ends on a signal between calls.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

#[derive(Debug, thiserror::Error)]
pub enum LendError {
    #[error("keeping the client's stream aside: {0}")]
    Save(std::io::Error),
    #[error("holding the command's stdin: {0}")]
    Hold(crate::sys::Errno),
    #[error("the command's stdin as fd 0: {0}")]
    Swap(crate::sys::Errno),
    #[error("reading the signal mask: {0}")]
    Mask(crate::sys::Errno),
}

/// fd 0 is the command's input, and the signal mask the call's, until
/// this drops.
pub struct Lent {
    client: OwnedFd,
    mask: nix::sys::signal::SigSet,
}

impl Lent {
    /// fd 0 reads `data` (None: /dev/null, as `husk exec` with no input).
    pub fn stdin(data: Option<&[u8]>) -> Result<Lent, LendError> {
        let mask = nix::sys::signal::SigSet::thread_get_mask().map_err(LendError::Mask)?;
        let client = std::io::stdin().as_fd().try_clone_to_owned().map_err(LendError::Save)?;
        let input: OwnedFd = match data {
            Some(d) => {
                let fd = crate::warm::sealed(&[d]).map_err(LendError::Hold)?;
                nix::unistd::lseek(&fd, 0, nix::unistd::Whence::SeekSet).map_err(LendError::Hold)?;
                fd
            }
            None => {
                use nix::fcntl::OFlag;
                nix::fcntl::open(c"/dev/null", OFlag::O_RDONLY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
                    .map_err(LendError::Hold)?
            }
        };
        crate::sys::fd::dup_onto(input.as_raw_fd(), 0).map_err(LendError::Swap)?;
        Ok(Lent { client, mask })
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Err(e) = crate::sys::fd::dup_onto(self.client.as_raw_fd(), 0) {
            // Without its input the server cannot go on: say so and end
            // rather than read a command's leftovers as requests.
            crate::errln!("husk mcp: giving the client's stream back to fd 0: {e}");
            std::process::exit(crate::outcome::EXIT_HUSK_FAILED);
        }
        // A signal that came during the call and was not the command's
        // arrives now, as it would have to a server that lent nothing.
        let _ = crate::sys::signal::set_mask(&self.mask);
    }
}
