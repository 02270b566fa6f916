//! The SEQPACKET channel between `create` (or `exec`) and the processes it
//! starts: one message per packet, plain text.
//!
//! ```text
//! child -> parent   pid N            the intermediate's report of init's host pid
//! parent -> init    go               uid/gid maps written, cgroup joined
//! init -> parent    hooks            mounts done, before pivot_root: run prestart/createRuntime
//! parent -> init    state JSON       hooks done; the state for createContainer/startContainer
//! init -> parent    ready            setup done; init now waits on exec.fifo
//! init -> parent    fail STEP ERRNO DETAIL
//! ```
//! EOF without `ready` means init died.

use crate::step::{Step, StepError};
use nix::errno::Errno;
use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockType, recv, send, socketpair};
use std::os::fd::{AsRawFd, OwnedFd};

pub struct Channel(pub OwnedFd);

#[derive(Debug, PartialEq, Eq)]
pub enum Msg {
    Pid(i32),
    Go,
    Hooks,
    State(String),
    Ready,
    Fail { step: Step, errno: Errno, detail: String },
    Eof,
}

pub fn pair() -> Result<(Channel, Channel), Errno> {
    let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)?;
    Ok((Channel(a), Channel(b)))
}

impl Channel {
    pub fn send(&self, m: &Msg) -> Result<(), Errno> {
        let text = match m {
            Msg::Pid(p) => format!("pid {p}"),
            Msg::Go => "go".into(),
            Msg::Hooks => "hooks".into(),
            Msg::State(s) => format!("state {s}"),
            Msg::Ready => "ready".into(),
            Msg::Fail { step, errno, detail } => format!("fail {} {} {detail}", *step as u16, *errno as i32),
            Msg::Eof => return Ok(()),
        };
        loop {
            match send(self.0.as_raw_fd(), text.as_bytes(), MsgFlags::MSG_NOSIGNAL) {
                Err(Errno::EINTR) => continue,
                r => return r.map(|_| ()),
            }
        }
    }

    pub fn fail(&self, e: StepError, detail: &str) {
        let _ = self.send(&Msg::Fail { step: e.step, errno: e.errno, detail: detail.to_string() });
    }

    pub fn recv(&self) -> Result<Msg, Errno> {
        let mut buf = vec![0u8; 1 << 20];
        let n = loop {
            match recv(self.0.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                Err(Errno::EINTR) => continue,
                r => break r?,
            }
        };
        if n == 0 {
            return Ok(Msg::Eof);
        }
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        let (head, rest) = text.split_once(' ').unwrap_or((&text, ""));
        Ok(match head {
            "pid" => Msg::Pid(rest.parse().map_err(|_| Errno::EPROTO)?),
            "go" => Msg::Go,
            "hooks" => Msg::Hooks,
            "state" => Msg::State(rest.to_string()),
            "ready" => Msg::Ready,
            "fail" => {
                let mut f = rest.splitn(3, ' ');
                let step = f.next().and_then(|s| s.parse().ok()).and_then(Step::from_u16).ok_or(Errno::EPROTO)?;
                let errno = Errno::from_raw(f.next().and_then(|s| s.parse().ok()).ok_or(Errno::EPROTO)?);
                Msg::Fail { step, errno, detail: f.next().unwrap_or("").to_string() }
            }
            _ => return Err(Errno::EPROTO),
        })
    }
}
