//! Passing file descriptors over a unix socket (SCM_RIGHTS).

use super::{SysResult, check};
use std::os::fd::{AsRawFd, BorrowedFd};

/// Most fds one message carries (the namespaces of a sandbox: 7).
pub const MAX_FDS: usize = 8;

/// Control buffer for up to `MAX_FDS` fds: CMSG_SPACE(8 * sizeof(int)) =
/// 48 bytes on 64-bit Linux, as u64s so it is aligned for `cmsghdr`.
type CmsgBuf = [u64; 6];
// SAFETY: CMSG_SPACE is arithmetic on its argument.
const _: () = assert!(std::mem::size_of::<CmsgBuf>() >= unsafe { libc::CMSG_SPACE(4 * MAX_FDS as u32) } as usize);

/// sendmsg(2) of `data` with `fd` attached. Builds the message on the
/// stack, so the sandbox child can use it between clone and execve.
pub fn send_with_fd(sock: BorrowedFd<'_>, data: &[u8], fd: BorrowedFd<'_>) -> SysResult<()> {
    send_with_fds(sock, data, &[fd])
}

/// sendmsg(2) of `data` with up to `MAX_FDS` fds attached (EINVAL beyond),
/// built on the stack like `send_with_fd`.
pub fn send_with_fds(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> SysResult<()> {
    if fds.is_empty() || fds.len() > MAX_FDS {
        return Err(super::Errno::EINVAL);
    }
    let bytes = (std::mem::size_of::<libc::c_int>() * fds.len()) as u32;
    let mut cbuf: CmsgBuf = [0; 6];
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: msghdr is plain old data; zeroed is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(bytes) } as usize;
    // SAFETY: msg_control points at `cbuf`, large enough for one header and
    // MAX_FDS ints (checked above, and fds.len() <= MAX_FDS), so
    // CMSG_FIRSTHDR is non-null and every write below is in bounds.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(bytes) as usize;
        let data = libc::CMSG_DATA(cmsg) as *mut libc::c_int;
        for (i, fd) in fds.iter().enumerate() {
            std::ptr::write_unaligned(data.add(i), fd.as_raw_fd());
        }
    }
    loop {
        // SAFETY: `msg` and everything it points to (iov, data, cbuf) live
        // across the call; the kernel only reads them.
        let ret = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        match check(ret as libc::c_long) {
            Err(super::Errno::EINTR) => continue,
            other => return other.map(|_| ()),
        }
    }
}
