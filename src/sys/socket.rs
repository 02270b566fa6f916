//! Passing a file descriptor over a unix socket (SCM_RIGHTS).

use super::{SysResult, check};
use std::os::fd::{AsRawFd, BorrowedFd};

/// Control buffer for one fd: CMSG_SPACE(sizeof(int)) = 24 bytes on 64-bit
/// Linux, as u64s so it is aligned for `cmsghdr`.
type CmsgBuf = [u64; 3];
// SAFETY: CMSG_SPACE is arithmetic on its argument.
const _: () = assert!(std::mem::size_of::<CmsgBuf>() >= unsafe { libc::CMSG_SPACE(4) } as usize);

/// sendmsg(2) of `data` with `fd` attached. Builds the message on the
/// stack, so the sandbox child can use it between clone and execve.
pub fn send_with_fd(sock: BorrowedFd<'_>, data: &[u8], fd: BorrowedFd<'_>) -> SysResult<()> {
    let mut cbuf: CmsgBuf = [0; 3];
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: msghdr is plain old data; zeroed is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    // SAFETY: msg_control points at `cbuf`, large enough for one header and
    // one int (checked above), so CMSG_FIRSTHDR is non-null and in bounds.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut libc::c_int, fd.as_raw_fd());
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
