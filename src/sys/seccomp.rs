//! Loading a pre-compiled classic-BPF seccomp program.

use super::fd::owned;
use super::{SysResult, check};
use std::os::fd::OwnedFd;

pub const SECCOMP_FILTER_FLAG_TSYNC: u32 = 1;
pub const SECCOMP_FILTER_FLAG_LOG: u32 = 2;
pub const SECCOMP_FILTER_FLAG_NEW_LISTENER: u32 = 1 << 3;

/// One BPF instruction, layout-identical to `struct sock_filter`.
pub type SockFilter = libc::sock_filter;

/// seccomp(SECCOMP_SET_MODE_FILTER). Requires no_new_privs (or
/// CAP_SYS_ADMIN). Returns the user-notification listener when
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER` is in `flags`.
pub fn install_filter(program: &[SockFilter], flags: u32) -> SysResult<Option<OwnedFd>> {
    const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
    let prog = libc::sock_fprog { len: program.len() as libc::c_ushort, filter: program.as_ptr() as *mut SockFilter };
    // SAFETY: `prog` points at `program`, which outlives the call; the kernel
    // copies the instructions.
    let ret =
        unsafe { libc::syscall(libc::SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog as *const libc::sock_fprog) };
    let ret = check(ret)?;
    Ok((flags & SECCOMP_FILTER_FLAG_NEW_LISTENER != 0).then(|| owned(ret)))
}
