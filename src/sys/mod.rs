//! The only place in husk with `unsafe`: thin, safe wrappers over the raw
//! syscalls that nix and libc do not wrap (or wrap with allocation that the
//! post-clone child must avoid). Every block carries a `// SAFETY:` note.
//!
//! Rule for callers: these functions never allocate, so they are usable in
//! the child between clone and execve.

pub mod bpf;
pub mod caps;
pub mod command;
pub mod fd;
pub mod ipc;
pub mod mount;
pub mod net;
pub mod process;
pub mod seccomp;
pub mod signal;
pub mod socket;
pub mod tty;
pub mod xattr;

pub use nix::errno::Errno;

/// Result type of every wrapper here: the raw errno is the error.
pub type SysResult<T> = Result<T, Errno>;

/// Turns a raw `-1 / errno` return into a `SysResult`.
fn check(ret: libc::c_long) -> SysResult<libc::c_long> {
    if ret < 0 { Err(Errno::last()) } else { Ok(ret) }
}
