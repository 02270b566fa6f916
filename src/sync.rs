//! The parent <-> sandbox channel: a SOCK_SEQPACKET pair, so every message
//! is one atomic datagram and EOF means the other side is gone. Messages are
//! fixed-size records encoded by hand (no allocation in the child).

use crate::step::{Step, StepError};
use nix::errno::Errno;
use nix::sys::socket::MsgFlags;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, recv, send, socketpair};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Number of phase timestamps a message can carry.
pub const MAX_TIMES: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Parent -> child: maps written (and cgroup joined); go on.
    Release,
    /// Child -> parent: a setup step failed.
    Failed(StepError),
    /// Child -> parent: CLOCK_MONOTONIC nanoseconds at the end of the setup
    /// phases (see `Phase`), sent just before execve.
    Times([u64; MAX_TIMES]),
    /// Init -> parent: the command (pid 2) ended this way.
    Exited {
        code: i32,
    },
    Signaled {
        signal: i32,
    },
    /// Init -> parent, just before the status: when the init reaped the
    /// command (CLOCK_MONOTONIC ns), to separate run time from teardown.
    Reaped {
        at: u64,
    },
    /// Command -> parent: the seccomp listener (explain mode), attached as
    /// SCM_RIGHTS.
    SeccompListener,
    /// Init -> parent (`husk create`'s hold mode): the sandbox's namespaces,
    /// `count` fds attached in `spawn::child::NAMESPACES` order.
    Namespaces {
        count: i32,
    },
    /// Exec joiner -> husk exec: the command is started; its pidfd is
    /// attached.
    Joined,
    /// Parent -> init (deferred cgroup): every limit is in place; the v1
    /// `tasks` files to write "0" to are attached.
    CgroupReady,
    /// Command -> parent (`-t`): the master of the command's pty, attached.
    PtyMaster,
    /// Init -> parent (`--network allow=`): the egress proxy's listeners
    /// (HTTP, then SOCKS), made inside the sandbox's network namespace.
    EgressListeners,
    /// Init -> parent (`--publish`): the host's end of the socket factory
    /// inside the sandbox's network namespace.
    PublishFactory,
    /// Warm session -> husk exec: the call ran past its timeout and was
    /// interrupted; `restarted` 1 when the session had to be started
    /// afresh (its state is gone), 2 when it ended on its own (`exit`) and
    /// was restarted, 0 when it lives on.
    Interrupted {
        restarted: i32,
    },
    /// Init -> parent, after the status: the command was reaped and no
    /// other process is left in the sandbox; the init has closed its stdio
    /// and waits, idle, until the parent has read the counters the verdict
    /// needs and closes the channel (`native::teardown`).
    Alone,
}

const LEN: usize = 4 + 4 + 8 * MAX_TIMES;

impl Msg {
    fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        let (tag, a, times): (u32, i32, [u64; MAX_TIMES]) = match *self {
            Msg::Release => (1, 0, [0; MAX_TIMES]),
            Msg::Failed(e) => {
                let mut t = [0; MAX_TIMES];
                t[0] = e.step as u64;
                t[1] = e.detail as u64;
                (2, e.errno as i32, t)
            }
            Msg::Times(t) => (3, 0, t),
            Msg::Exited { code } => (4, code, [0; MAX_TIMES]),
            Msg::Signaled { signal } => (5, signal, [0; MAX_TIMES]),
            Msg::Reaped { at } => (6, 0, [at, 0, 0, 0, 0, 0, 0, 0]),
            Msg::SeccompListener => (7, 0, [0; MAX_TIMES]),
            Msg::Namespaces { count } => (8, count, [0; MAX_TIMES]),
            Msg::Joined => (9, 0, [0; MAX_TIMES]),
            Msg::CgroupReady => (10, 0, [0; MAX_TIMES]),
            Msg::PtyMaster => (11, 0, [0; MAX_TIMES]),
            Msg::EgressListeners => (12, 0, [0; MAX_TIMES]),
            Msg::PublishFactory => (13, 0, [0; MAX_TIMES]),
            Msg::Interrupted { restarted } => (14, restarted, [0; MAX_TIMES]),
            Msg::Alone => (15, 0, [0; MAX_TIMES]),
        };
        b[0..4].copy_from_slice(&tag.to_ne_bytes());
        b[4..8].copy_from_slice(&a.to_ne_bytes());
        for (i, t) in times.iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&t.to_ne_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Option<Msg> {
        if b.len() != LEN {
            return None;
        }
        let tag = u32::from_ne_bytes(b[0..4].try_into().ok()?);
        let a = i32::from_ne_bytes(b[4..8].try_into().ok()?);
        let mut t = [0u64; MAX_TIMES];
        for (i, v) in t.iter_mut().enumerate() {
            *v = u64::from_ne_bytes(b[8 + 8 * i..16 + 8 * i].try_into().ok()?);
        }
        Some(match tag {
            1 => Msg::Release,
            2 => Msg::Failed(StepError {
                step: Step::from_u16(t[0] as u16)?,
                errno: Errno::from_raw(a),
                detail: t[1] as u32,
            }),
            3 => Msg::Times(t),
            4 => Msg::Exited { code: a },
            5 => Msg::Signaled { signal: a },
            6 => Msg::Reaped { at: t[0] },
            7 => Msg::SeccompListener,
            8 => Msg::Namespaces { count: a },
            9 => Msg::Joined,
            10 => Msg::CgroupReady,
            11 => Msg::PtyMaster,
            12 => Msg::EgressListeners,
            13 => Msg::PublishFactory,
            14 => Msg::Interrupted { restarted: a },
            15 => Msg::Alone,
            _ => return None,
        })
    }
}

/// One end of the channel.
#[derive(Debug)]
pub struct Channel(OwnedFd);

impl Channel {
    /// A connected pair, both ends close-on-exec.
    pub fn pair() -> Result<(Channel, Channel), Errno> {
        let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)?;
        Ok((Channel(a), Channel(b)))
    }

    pub fn send(&self, msg: Msg) -> Result<(), Errno> {
        let buf = msg.encode();
        loop {
            match send(self.0.as_fd().as_raw_fd_compat(), &buf, MsgFlags::MSG_NOSIGNAL) {
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
                Ok(_) => return Ok(()),
            }
        }
    }

    /// Blocks for one message; `Ok(None)` is EOF (peer closed or exec'd).
    pub fn recv(&self) -> Result<Option<Msg>, Errno> {
        let mut buf = [0u8; LEN + 1];
        loop {
            match recv(self.0.as_fd().as_raw_fd_compat(), &mut buf, MsgFlags::empty()) {
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
                Ok(0) => return Ok(None),
                Ok(n) => return Msg::decode(&buf[..n]).map(Some).ok_or(Errno::EBADMSG),
            }
        }
    }

    /// Sends `msg` with `fd` attached (no allocation: usable in the child).
    pub fn send_fd(&self, msg: Msg, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        crate::sys::socket::send_with_fd(self.0.as_fd(), &msg.encode(), fd)
    }

    /// Like `recv`, also returning a file descriptor attached to the message.
    pub fn recv_with_fd(&self) -> Result<Option<(Msg, Option<OwnedFd>)>, Errno> {
        Ok(self.recv_with_fds()?.map(|(m, fds)| (m, fds.into_iter().next())))
    }

    /// Sends `msg` with several fds attached (no allocation).
    pub fn send_fds(&self, msg: Msg, fds: &[BorrowedFd<'_>]) -> Result<(), Errno> {
        crate::sys::socket::send_with_fds(self.0.as_fd(), &msg.encode(), fds)
    }

    /// Like `recv`, also returning every file descriptor attached to the
    /// message (at most `sys::socket::MAX_FDS`), in order.
    pub fn recv_with_fds(&self) -> Result<Option<(Msg, Vec<OwnedFd>)>, Errno> {
        use nix::sys::socket::{ControlMessageOwned, recvmsg};
        use std::os::fd::{AsRawFd, RawFd};
        let mut buf = [0u8; LEN + 1];
        let mut cmsg = nix::cmsg_space!([RawFd; crate::sys::socket::MAX_FDS]);
        loop {
            let mut iov = [std::io::IoSliceMut::new(&mut buf)];
            let r = recvmsg::<()>(self.0.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC);
            let msg = match r {
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
                Ok(m) => m,
            };
            let mut fds = Vec::new();
            for c in msg.cmsgs().map_err(|_| Errno::EBADMSG)? {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    // The kernel just installed these in our fd table: ours
                    // to own (and to close when unused).
                    fds.extend(raw.into_iter().map(|fd| crate::sys::fd::owned(fd as libc::c_long)));
                }
            }
            let n = msg.bytes;
            if n == 0 {
                return Ok(None);
            }
            return Msg::decode(&buf[..n]).map(|m| Some((m, fds))).ok_or(Errno::EBADMSG);
        }
    }

    /// True when the other end is closed (checked without blocking).
    pub fn peer_gone(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) => fds[0].revents().is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)),
            Err(_) => false,
        }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

trait RawCompat {
    fn as_raw_fd_compat(&self) -> std::os::fd::RawFd;
}

impl RawCompat for BorrowedFd<'_> {
    fn as_raw_fd_compat(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let (a, b) = Channel::pair().unwrap();
        let msgs = [
            Msg::Release,
            Msg::Failed(StepError { step: Step::PivotRoot, errno: Errno::EINVAL, detail: 7 }),
            Msg::Times([1, 2, 3, 4, 5, 6, 7, 8]),
            Msg::Exited { code: 3 },
            Msg::Signaled { signal: 9 },
            Msg::Reaped { at: 42 },
            Msg::SeccompListener,
            Msg::Namespaces { count: 7 },
            Msg::Joined,
            Msg::CgroupReady,
            Msg::PtyMaster,
            Msg::EgressListeners,
            Msg::PublishFactory,
            Msg::Alone,
        ];
        for m in msgs {
            a.send(m).unwrap();
            assert_eq!(b.recv().unwrap(), Some(m));
        }
        drop(a);
        assert_eq!(b.recv().unwrap(), None);
    }

    #[test]
    fn a_file_descriptor_travels_with_its_message() {
        let (a, b) = Channel::pair().unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        a.send_fd(Msg::SeccompListener, w.as_fd()).unwrap();
        drop(w);
        let (msg, fd) = b.recv_with_fd().unwrap().unwrap();
        assert_eq!(msg, Msg::SeccompListener);
        nix::unistd::write(fd.unwrap(), b"x").unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(nix::unistd::read(&r, &mut buf).unwrap(), 1);
        a.send(Msg::Exited { code: 0 }).unwrap();
        assert_eq!(b.recv_with_fd().unwrap().map(|(m, fd)| (m, fd.is_none())), Some((Msg::Exited { code: 0 }, true)));
    }

    #[test]
    fn several_file_descriptors_travel_in_order() {
        let (a, b) = Channel::pair().unwrap();
        let pipes: Vec<_> = (0..3).map(|_| nix::unistd::pipe().unwrap()).collect();
        let ends: Vec<BorrowedFd<'_>> = pipes.iter().map(|(_, w)| w.as_fd()).collect();
        a.send_fds(Msg::Namespaces { count: 3 }, &ends).unwrap();
        let (msg, fds) = b.recv_with_fds().unwrap().unwrap();
        assert_eq!((msg, fds.len()), (Msg::Namespaces { count: 3 }, 3));
        for (i, fd) in fds.into_iter().enumerate() {
            nix::unistd::write(fd, &[i as u8]).unwrap();
            let mut buf = [9u8; 1];
            nix::unistd::read(&pipes[i].0, &mut buf).unwrap();
            assert_eq!(buf[0], i as u8);
        }
    }
}
