//! The stdin of a command `husk mcp` runs in a sandbox.
//!
//! An exec's command inherits the stdin of the process that starts it
//! (backend/native/join.rs keeps fd 0), and this server's fd 0 is the
//! client's JSON-RPC stream: a command that read it would eat the next
//! requests. So for the length of one library call fd 0 is the call's own
//! input (a sealed memfd holding the tool's `stdin`, or /dev/null), and
//! the client's stream is put back when the guard drops. One request at a
//! time and one thread (mod.rs): nothing reads fd 0 meanwhile; what the
//! server had already buffered from it stays in its `BufRead`.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

#[derive(Debug, thiserror::Error)]
pub enum StdinError {
    #[error("keeping the client's stream aside: {0}")]
    Save(std::io::Error),
    #[error("holding the command's stdin: {0}")]
    Hold(crate::sys::Errno),
    #[error("the command's stdin as fd 0: {0}")]
    Swap(crate::sys::Errno),
}

/// fd 0 is the command's input until this drops.
pub struct CommandStdin {
    client: OwnedFd,
}

impl CommandStdin {
    /// fd 0 reads `data` (None: /dev/null, as `husk exec` with no input).
    pub fn give(data: Option<&[u8]>) -> Result<CommandStdin, StdinError> {
        let client = std::io::stdin().as_fd().try_clone_to_owned().map_err(StdinError::Save)?;
        let input: OwnedFd = match data {
            Some(d) => {
                let fd = crate::warm::sealed(&[d]).map_err(StdinError::Hold)?;
                nix::unistd::lseek(&fd, 0, nix::unistd::Whence::SeekSet).map_err(StdinError::Hold)?;
                fd
            }
            None => {
                use nix::fcntl::OFlag;
                nix::fcntl::open(c"/dev/null", OFlag::O_RDONLY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
                    .map_err(StdinError::Hold)?
            }
        };
        crate::sys::fd::dup_onto(input.as_raw_fd(), 0).map_err(StdinError::Swap)?;
        Ok(CommandStdin { client })
    }
}

impl Drop for CommandStdin {
    fn drop(&mut self) {
        if let Err(e) = crate::sys::fd::dup_onto(self.client.as_raw_fd(), 0) {
            // Without its input the server cannot go on: say so and end
            // rather than read a command's leftovers as requests.
            crate::errln!("husk mcp: giving the client's stream back to fd 0: {e}");
            std::process::exit(crate::outcome::EXIT_HUSK_FAILED);
        }
    }
}
