//! File-descriptor helpers and pre-built argument vectors for execve.

use super::{SysResult, check};
use std::ffi::{CStr, CString};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Marks (or closes) every fd in `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseRange {
    /// Close the fds now.
    Close,
    /// Set FD_CLOEXEC, so execve closes them; lets the caller keep using a
    /// CLOEXEC reporting pipe until the very last moment.
    Cloexec,
}

/// close_range(2) over `first..=u32::MAX`.
pub fn close_from(first: u32, mode: CloseRange) -> SysResult<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    let flags = match mode {
        CloseRange::Close => 0,
        CloseRange::Cloexec => CLOSE_RANGE_CLOEXEC,
    };
    // SAFETY: close_range takes plain integers and touches only our fd table.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, flags) };
    check(ret).map(|_| ())
}

/// Takes ownership of a raw fd returned by a syscall.
///
/// The caller guarantees `fd` is a freshly returned, open descriptor that
/// nothing else owns.
pub(crate) fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: per this function's contract, `fd` is open and unowned.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// A NULL-terminated `char *const[]` built before clone, so execve in the
/// child needs no allocation.
pub struct CStrArray {
    owned: Vec<CString>,
    ptrs: Vec<*const libc::c_char>,
}

impl CStrArray {
    pub fn new(items: Vec<CString>) -> Self {
        let mut ptrs: Vec<*const libc::c_char> = items.iter().map(|s| s.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        CStrArray { owned: items, ptrs }
    }

    pub fn as_ptr(&self) -> *const *const libc::c_char {
        self.ptrs.as_ptr()
    }

    pub fn iter(&self) -> impl Iterator<Item = &CStr> {
        self.owned.iter().map(|s| s.as_c_str())
    }

    pub fn len(&self) -> usize {
        self.owned.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owned.is_empty()
    }
}

impl Clone for CStrArray {
    fn clone(&self) -> Self {
        CStrArray::new(self.owned.clone())
    }
}

impl std::fmt::Debug for CStrArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.owned.iter()).finish()
    }
}

/// dup2(from, to): `to` is a fresh copy without FD_CLOEXEC.
pub fn dup_onto(from: RawFd, to: RawFd) -> SysResult<()> {
    // SAFETY: dup2 on integer fds; the caller owns both numbers.
    let ret = unsafe { libc::dup2(from, to) };
    check(ret as libc::c_long).map(|_| ())
}

/// getcwd(2) into `buf`, failing with ENOENT when the kernel reports the
/// cwd as unreachable from our root (it prefixes "(unreachable)"), and
/// ERANGE when `buf` is too small for a reachable path.
pub fn getcwd_reachable(buf: &mut [u8]) -> SysResult<()> {
    // SAFETY: the kernel writes at most buf.len() bytes into buf.
    let ret = unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) };
    match check(ret) {
        Ok(_) if buf[0] == b'/' => Ok(()),
        Ok(_) => Err(super::Errno::ENOENT),
        Err(e) => Err(e),
    }
}

/// Closes every fd above 2 except those in `keep` (at most 16), with one
/// close_range(2) per gap. Allocates nothing.
pub fn close_all_except(keep: &[RawFd]) -> SysResult<()> {
    close_from_except(3, keep)
}

/// Closes every fd from `first` on except those in `keep` (at most 16).
pub fn close_from_except(first: u32, keep: &[RawFd]) -> SysResult<()> {
    let mut sorted = [RawFd::MAX; 16];
    if keep.len() > sorted.len() {
        return Err(super::Errno::EINVAL);
    }
    sorted[..keep.len()].copy_from_slice(keep);
    sorted.sort_unstable();
    let mut next: libc::c_uint = first.max(3);
    for &fd in sorted.iter().take(keep.len()) {
        if fd < 3 || (fd as libc::c_uint) < next {
            continue;
        }
        if fd as libc::c_uint > next {
            // SAFETY: close_range takes plain integers and touches only our fd table.
            check(unsafe { libc::syscall(libc::SYS_close_range, next, fd as libc::c_uint - 1, 0) })?;
        }
        next = fd as libc::c_uint + 1;
    }
    // SAFETY: as above.
    check(unsafe { libc::syscall(libc::SYS_close_range, next, libc::c_uint::MAX, 0) }).map(|_| ())
}

/// flock(LOCK_EX | LOCK_NB) on `fd`'s open file: true when taken, false
/// when another open file holds it. Unlike nix's `Flock`, nothing unlocks
/// on drop: the lock lives as long as any fd of this open file (a forked
/// child's copy keeps it after the parent closes its own).
pub fn try_lock_exclusive(fd: std::os::fd::BorrowedFd<'_>) -> SysResult<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a borrowed, open fd; no memory is passed.
    let ret = unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    match check(ret as libc::c_long) {
        Ok(_) => Ok(true),
        Err(super::Errno::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}
