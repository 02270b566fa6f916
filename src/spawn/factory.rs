//! `--publish`'s socket factory: a child of the sandbox's init, inside the
//! sandbox's network namespace, that answers each request on its socket
//! pair with a fresh, unconnected TCP socket of that namespace. husk's
//! publish forwarder connects it to the sandbox's port (src/net/publish.rs
//! says why this shape). It holds nothing but its end of the pair, no
//! capability, and dies with the init.

use crate::plan::Plan;
use crate::step::{AtStep, Step, StepError};
use crate::sync::{Channel, Msg};
use crate::sys::process::{Forked, SingleThreaded, exit_now, fork};
use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockType, recv, socket, socketpair};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// Forks the factory (after the root is pivoted, so it sees only the
/// sandbox's files, and inside the sandbox's cgroup) and hands husk the
/// other end of its socket pair.
pub fn start(plan: &Plan, chan: &Channel, one: &SingleThreaded) -> Result<(), StepError> {
    let (mine, theirs) =
        socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).at(Step::PublishFactory)?;
    match fork(one).at(Step::PublishFactory)? {
        Forked::Child(_) => {
            drop(theirs);
            if confine(plan, &mine).is_err() {
                exit_now(125);
            }
            serve(mine)
        }
        Forked::Parent { .. } => {
            drop(mine);
            chan.send_fds(Msg::PublishFactory, &[theirs.as_fd()]).at(Step::PublishFactory)
        }
    }
}

/// Only its socket; no capability, no new privileges; gone with the init.
fn confine(plan: &Plan, sock: &OwnedFd) -> Result<(), crate::sys::Errno> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    let _ = nix::sys::prctl::set_name(c"husk:[publish]");
    crate::sys::fd::close_all_except(&[sock.as_raw_fd()])?;
    crate::sys::caps::drop_bounding(crate::sys::caps::all_caps(plan.last_cap), 0)?;
    crate::sys::caps::set_process_caps(0, plan.last_cap)?;
    nix::sys::prctl::set_no_new_privs()
}

/// One byte in (4: IPv4, 6: IPv6), one socket out; EOF ends it.
fn serve(sock: OwnedFd) -> ! {
    let mut ask = [0u8; 1];
    loop {
        match recv(sock.as_raw_fd(), &mut ask, MsgFlags::empty()) {
            Ok(1) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            _ => exit_now(0),
        }
        let family = if ask[0] == 6 { AddressFamily::Inet6 } else { AddressFamily::Inet };
        let sent = match socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None) {
            Ok(s) => crate::sys::socket::send_with_fd(sock.as_fd(), b"s", s.as_fd()),
            // The forwarder reads a reply without a socket as a refusal.
            Err(_) => nix::sys::socket::send(sock.as_raw_fd(), b"e", MsgFlags::MSG_NOSIGNAL).map(|_| ()),
        };
        if sent.is_err() {
            exit_now(0);
        }
    }
}
