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
