//! The sandbox's network namespace: created with its loopback up, then
//! entered by the init through a socket that lives in it.

use super::{Errno, SysResult};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// SIOCGSKNS (linux/sockios.h): an fd for the netns a socket lives in. The
/// libc crate defines it for Android only.
const SIOCGSKNS: libc::c_ulong = 0x894C;

/// unshare(CLONE_NEWNET) for the calling thread, and "lo" up in the new
/// namespace. Returns the socket used for that: it lives in the new
/// namespace, so `enter_netns_of` can bring another thread there.
pub fn new_netns_with_loopback() -> Result<OwnedFd, (bool, Errno)> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| (false, e))?;
    let sock = socket(AddressFamily::Inet, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None).map_err(|e| (true, e))?;
    loopback_up(sock.as_raw_fd()).map_err(|e| (true, e))?;
    Ok(sock)
}

/// setns into the network namespace `sock` lives in.
pub fn enter_netns_of(sock: BorrowedFd<'_>) -> SysResult<()> {
    // SAFETY: SIOCGSKNS takes no argument and returns a new fd or -1.
    let fd = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSKNS as _) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    let ns = unsafe { OwnedFd::from_raw_fd(fd) };
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
}

/// SIOCGIFFLAGS / SIOCSIFFLAGS on "lo": a new netns has lo, but down.
fn loopback_up(sock: libc::c_int) -> SysResult<()> {
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
