//! Loading a pre-compiled classic-BPF seccomp program, and answering its
//! user notifications.

use super::fd::owned;
use super::{SysResult, check};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

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

/// SECCOMP_IOCTL_NOTIF_RECV: blocks until a filtered task waits for an
/// answer (poll the listener for POLLIN first).
pub fn notif_recv(listener: BorrowedFd<'_>) -> SysResult<libc::seccomp_notif> {
    // SAFETY: seccomp_notif is plain old data; the kernel wants it zeroed.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl writes one seccomp_notif into `n`, which outlives the call.
    let ret = unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) };
    check(ret as libc::c_long)?;
    Ok(n)
}

/// SECCOMP_IOCTL_NOTIF_SEND: fails the notified syscall with `errno` (0:
/// it returns 0 without running). Never sets FLAG_CONTINUE, so the syscall
/// itself never runs.
pub fn notif_send(listener: BorrowedFd<'_>, id: u64, errno: u16) -> SysResult<()> {
    let mut resp = libc::seccomp_notif_resp { id, val: 0, error: -(errno as i32), flags: 0 };
    // SAFETY: the ioctl reads one seccomp_notif_resp from `resp`, which outlives the call.
    let ret = unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) };
    check(ret as libc::c_long).map(|_| ())
}
