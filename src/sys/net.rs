//! The sandbox's network namespace: clone3 makes it (CLONE_NEWNET) with its
//! loopback down; the init brings "lo" up.

use super::{Errno, SysResult};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
use std::os::fd::AsRawFd;

/// SIOCGIFFLAGS / SIOCSIFFLAGS on "lo" in the caller's network namespace
/// (needs CAP_NET_ADMIN over it): a new netns has lo, but down.
pub fn loopback_up() -> SysResult<()> {
    let sock = socket(AddressFamily::Inet, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)?;
    let sock = sock.as_raw_fd();
    // SAFETY: ifreq is plain old data; zeroed is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq for SIOCGIFFLAGS on a live socket.
    if unsafe { libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel filled ifru_flags above; union access of that member.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: as above, for SIOCSIFFLAGS.
    if unsafe { libc::ioctl(sock, libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// A TCP socket listening on 127.0.0.1:`port` in the caller's network
/// namespace (the sandbox's egress proxy ports, made by its init). No
/// allocation: runs in the child between clone and execve.
pub fn listen_loopback(port: u16) -> SysResult<std::os::fd::OwnedFd> {
    use nix::sys::socket::{Backlog, SockaddrIn, bind, listen};
    let sock = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    bind(sock.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, port))?;
    listen(&sock, Backlog::new(1024).unwrap_or(Backlog::MAXCONN))?;
    Ok(sock)
}

/// Takes ownership of a listening socket inherited at `fd` (the egress
/// proxy's, from its parent), after checking that `fd` is open and a
/// listening socket: a wrong number fails here, not as someone else's fd.
pub fn inherited_listener(fd: std::os::fd::RawFd) -> SysResult<std::os::fd::OwnedFd> {
    if fd < 3 {
        return Err(Errno::EBADF);
    }
    // SAFETY: fcntl(F_GETFD) on an integer only reads the fd table.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(Errno::last());
    }
    let mut val: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `val`/`len` are valid for the int SO_ACCEPTCONN writes.
    let r = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN, (&mut val as *mut libc::c_int).cast(), &mut len)
    };
    if r < 0 {
        return Err(Errno::last());
    }
    if val == 0 {
        return Err(Errno::EINVAL);
    }
    // Close-on-exec again: the proxy starts nothing, but nothing it might
    // start should inherit the sandbox's listeners.
    // SAFETY: as above, F_SETFD on an open fd.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(super::fd::owned(fd as libc::c_long))
}

/// Clears FD_CLOEXEC so a helper started next inherits `fd`.
pub fn keep_across_exec(fd: std::os::fd::BorrowedFd<'_>) -> SysResult<()> {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).map(|_| ())
}

/// Takes ownership of a socket inherited at `fd` (the publish forwarder's
/// end of the sandbox's socket factory), after checking that `fd` is open
/// and a socket.
pub fn inherited_socket(fd: std::os::fd::RawFd) -> SysResult<std::os::fd::OwnedFd> {
    if fd < 3 {
        return Err(Errno::EBADF);
    }
    // SAFETY: stat is plain old data; zeroed is valid for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on an integer fd writes only into `st`.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(Errno::last());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(Errno::ENOTSOCK);
    }
    // SAFETY: F_SETFD on an open fd (checked above).
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(super::fd::owned(fd as libc::c_long))
}

/// splice(2) of up to `len` bytes from `from` to `to` (one of them a pipe),
/// without offsets, with SPLICE_F_MOVE: the egress relay's way of moving a
/// connection's payload without copying it through user memory. Ok(0): EOF
/// on `from`.
pub fn splice_move(from: std::os::fd::BorrowedFd<'_>, to: std::os::fd::BorrowedFd<'_>, len: usize) -> SysResult<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: two live fds borrowed for the call; null offsets (splice
    // then uses and advances the file positions, of which sockets and
    // pipes have none); no memory of ours is passed.
    let n = unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE,
        )
    };
    super::check(n as libc::c_long).map(|n| n as usize)
}
