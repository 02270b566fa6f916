//! Extended attributes on open fds (nix has no xattr wrappers). Used by the
//! image unpacker to mark overlay-opaque directories and to carry `user.*`
//! attributes from layers, always on an fd it opened without following
//! symlinks, never on a path.

use super::{SysResult, check};
use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// fsetxattr(2) with flags 0 (create or replace).
pub fn fset(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> SysResult<()> {
    // SAFETY: `name` is a valid C string and `value` a valid slice for the call.
    let ret = unsafe { libc::fsetxattr(fd.as_raw_fd(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    check(ret as libc::c_long).map(|_| ())
}

/// fgetxattr(2) into `buf`; returns the value's length.
pub fn fget(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> SysResult<usize> {
    // SAFETY: the kernel writes at most buf.len() bytes into buf.
    let ret = unsafe { libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    check(ret as libc::c_long).map(|n| n as usize)
}
