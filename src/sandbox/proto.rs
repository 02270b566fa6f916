//! The supervisor's socket: one SOCK_SEQPACKET unix socket per sandbox, in
//! its private (0700) state directory. Every message is one JSON object in
//! one datagram; the reply to `exec` carries the sandbox's namespaces as
//! fds (SCM_RIGHTS). Both ends check the other (SO_PEERCRED): the
//! supervisor serves its own uid and root only, clients talk only to the
//! supervisor pid the record names.
//!
//! An exec keeps its connection for as long as it runs: the supervisor
//! counts running execs by open connections, so an exec that dies without a
//! word (SIGKILL) still ends, and the lease cannot run out under one.

use super::SandboxError;
use crate::procref::ProcRef;
use nix::sys::socket::{
    AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr, accept4, bind,
    connect, getsockopt, listen, recvmsg, sendmsg, socket, sockopt,
};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

/// Largest message either side sends (a reply with the egress accounting:
/// 2 x 20 entries whose names may be 253 bytes long).
const MAX_MSG: usize = 64 * 1024;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Start an exec. Refused with `busy` while another runs (unless the
    /// sandbox is concurrent); with `wait`, answered when it is this one's
    /// turn. The exec ends when its connection closes.
    Exec {
        wait: bool,
        /// The exec's id, when its backend names an exec by one rather
        /// than by a cgroup leaf (`backend::announced_exec_id`), so the
        /// supervisor can end the command if husk exec dies without a word
        /// (`Live::exec_abandoned`). Read under its former name too: a
        /// husk exec of the previous version may talk to this supervisor.
        #[serde(default, alias = "runsc_exec", skip_serializing_if = "Option::is_none")]
        exec_id: Option<String>,
        /// `husk exec --code`: also hand over the warm interpreter's
        /// control socket (the last fd attached; `Reply::warm`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        warm: bool,
        /// `husk create --ready-cmd`'s check: the one exec a sandbox that
        /// is still CREATING admits (and the only time this is admitted).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ready_check: bool,
        /// The exec's own `--timeout`: the longest it waits for a freeze
        /// (`Freeze`) to end before it would start. Past it, the answer
        /// is an error with `frozen_timeout`, and nothing runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Extends the lease to now + `ttl_ms` (default: the sandbox's ttl),
    /// which also becomes the sandbox's ttl.
    Renew { ttl_ms: Option<u64> },
    /// Destroy the sandbox now; the supervisor replies, then tears down.
    Destroy,
    /// The record as the supervisor holds it: unlike state.json (written
    /// after each change), ordered with every request before it, so an
    /// exec that has returned is never shown running.
    Status,
    /// Hands an unclaimed member of pool `pool` (labelled `husk.pool=POOL`,
    /// never exec'd) to a caller: the pool label goes, the caller's labels,
    /// name and lease come. The supervisor answers one request at a time, so
    /// of two claims of one member exactly one wins (see `sandbox::pool`).
    Claim {
        pool: String,
        #[serde(default)]
        labels: std::collections::BTreeMap<String, String>,
        ttl_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Destroy the sandbox only if it is still an unclaimed member of pool
    /// `pool` (what serve asks of its members when it stops or drops a
    /// pool). Ordered with `Claim` by the supervisor: a member claimed a
    /// moment ago refuses (`ok` false) and lives on as its caller's.
    Retire { pool: String },
    /// On an exec's connection, before it ends: the sandbox's events since
    /// the exec started (OOM kills and pids-limit hits anywhere in the
    /// sandbox, renewals, other execs), for its verdict.
    Events,
    /// The sandbox's secrets (`create --secret-env`), for an exec about to
    /// start: they go to the command's environment and the exec's output
    /// redaction, and are never written to disk.
    Secrets,
    /// Freeze the sandbox's cgroup tree for a reader (`husk commit`,
    /// `husk fork`) for at most `for_ms`: answered once it is frozen. The
    /// supervisor thaws when this connection sends `Thaw` or closes (the
    /// reader was killed) or the time passes, whichever comes first;
    /// execs asked for meanwhile wait for the thaw.
    Freeze { for_ms: u64 },
    /// The reader is done: `ok` if the sandbox stayed frozen all along
    /// (false: the deadline passed first, so what was read may be torn).
    Thaw,
    /// `husk pause`: freeze the sandbox until `Resume`, `Destroy` or its
    /// maximum lifetime, whoever asked having long gone (the supervisor
    /// holds the pause, not this connection). `reclaim`: then push its
    /// memory out (cgroup v2's memory.reclaim). Pausing a paused sandbox
    /// is a no-op.
    Pause {
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reclaim: bool,
    },
    /// `husk resume`: let a paused sandbox run again (a no-op if it is
    /// not paused); its lease restarts from now.
    Resume,
    /// `husk fork --memory`: save the sandbox's processes with their
    /// memory into `<sandbox dir>/memfork-<tag>` (`tag` an id) and let it
    /// run on; the answer's `checkpoint` names the image, which the forks
    /// restore from and the caller removes.
    SaveMemory { tag: String },
}

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub struct Reply {
    pub ok: bool,
    pub error: Option<String>,
    /// The exec was refused because another one runs.
    pub busy: bool,
    pub expires_ms: u64,
    pub ttl_ms: u64,
    /// This exec's number in the sandbox (1, 2, ...).
    pub exec: u64,
    /// The namespaces attached, in the order they are to be joined.
    pub namespaces: Vec<String>,
    /// The exec's cgroup leaf (`exec-<id>`), made ahead by the supervisor,
    /// which also removes it when the exec ends; `None` without cgroups.
    pub leaf: Option<String>,
    /// `exec` with `warm`: the warm interpreter's control socket is the
    /// last fd attached.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warm: bool,
    /// `exec`: refused because the sandbox stayed frozen (for a commit or
    /// fork) past the exec's `timeout_ms`; it never started.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub frozen_timeout: bool,
    /// `exec`: how long it waited in the queue it joined behind a freeze,
    /// which its own timeout counts (the command gets what is left).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub frozen_wait_ms: u64,
    /// `status`: the live part of the record (the rest is in state.json).
    pub state: Option<super::state::State>,
    pub active_execs: u32,
    /// `events`: what happened since the exec started; `status`: the
    /// newest events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<super::events::Event>,
    /// `status`, `events`: the egress proxy's accounting so far
    /// (`--network allow=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Box<crate::net::account::NetworkReport>>,
    /// `secrets`: (name, value) pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<(String, String)>,
    /// `pause`, `resume`, `status`: the sandbox is paused (now).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// `pause` with `reclaim`: the bytes the kernel pushed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimed_bytes: Option<u64>,
    /// `pause` of a sandbox that pauses by checkpoint (runsc): its image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<super::state::CheckpointRecord>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The socket's address; paths too long for `sun_path` (108 bytes) go
/// through the directory's fd (/proc/self/fd/N/sock).
fn with_addr<T>(dir: &Path, f: impl FnOnce(&UnixAddr) -> nix::Result<T>) -> nix::Result<T> {
    let path = dir.join("sock");
    if path.as_os_str().len() < 100 {
        return f(&UnixAddr::new(&path)?);
    }
    let d =
        nix::fcntl::open(dir, nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())?;
    let short = format!("/proc/self/fd/{}/sock", d.as_raw_fd());
    f(&UnixAddr::new(short.as_str())?)
}

fn seqpacket() -> nix::Result<OwnedFd> {
    socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None)
}

fn sock_err(what: &'static str, dir: &Path, errno: nix::errno::Errno) -> SandboxError {
    SandboxError::Socket { what, path: dir.join("sock"), errno }
}

/// Sends one message with `fds` attached.
pub fn send(sock: BorrowedFd<'_>, msg: &impl Serialize, fds: &[RawFd]) -> nix::Result<()> {
    let data = serde_json::to_vec(msg).map_err(|_| nix::errno::Errno::EINVAL)?;
    let iov = [std::io::IoSlice::new(&data)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => return other.map(|_| ()),
        }
    }
}

/// Receives one message and the fds attached; `Ok(None)` at EOF.
pub fn recv<T: for<'de> Deserialize<'de>>(sock: BorrowedFd<'_>) -> nix::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut buf = vec![0u8; MAX_MSG];
    let mut cspace = nix::cmsg_space!([RawFd; crate::sys::socket::MAX_FDS]);
    loop {
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let msg = match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cspace), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e),
            Ok(m) => m,
        };
        let mut fds = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // Just installed in our table by the kernel: ours to own.
                fds.extend(raw.into_iter().map(|fd| crate::sys::fd::owned(fd as libc::c_long)));
            }
        }
        let n = msg.bytes;
        if n == 0 {
            return Ok(None);
        }
        let value = serde_json::from_slice(&buf[..n]).map_err(|_| nix::errno::Errno::EBADMSG)?;
        return Ok(Some((value, fds)));
    }
}

/// The supervisor's listening socket.
pub fn listen_at(dir: &Path) -> Result<OwnedFd, SandboxError> {
    let fd = seqpacket().map_err(|e| sock_err("creating", dir, e))?;
    with_addr(dir, |addr| bind(fd.as_raw_fd(), addr)).map_err(|e| sock_err("binding", dir, e))?;
    listen(&fd, Backlog::new(64).unwrap_or(Backlog::MAXCONN)).map_err(|e| sock_err("listening on", dir, e))?;
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK))
        .map_err(|e| sock_err("configuring", dir, e))?;
    Ok(fd)
}

/// Accepts one pending client of the supervisor's uid (or root); others are
/// hung up on. `Ok(None)` when no one is waiting.
pub fn accept(listener: BorrowedFd<'_>) -> nix::Result<Option<OwnedFd>> {
    loop {
        let raw = match accept4(listener, SockFlag::SOCK_CLOEXEC) {
            Err(nix::errno::Errno::EAGAIN) => return Ok(None),
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::ECONNABORTED) => continue,
            Err(e) => return Err(e),
            Ok(fd) => fd,
        };
        let me = nix::unistd::Uid::effective().as_raw();
        match getsockopt(&raw, sockopt::PeerCredentials) {
            Ok(c) if c.uid() == me || c.uid() == 0 => return Ok(Some(raw)),
            _ => continue,
        }
    }
}

/// A client's connection to a sandbox's supervisor.
pub struct Client {
    sock: OwnedFd,
    dir: std::path::PathBuf,
}

impl Client {
    /// Connects and checks that the peer is the recorded supervisor.
    pub fn connect(dir: &Path, supervisor: Option<ProcRef>) -> Result<Client, SandboxError> {
        let sock = seqpacket().map_err(|e| sock_err("creating a socket for", dir, e))?;
        with_addr(dir, |addr| connect(sock.as_raw_fd(), addr)).map_err(|e| sock_err("connecting to", dir, e))?;
        if let Some(sup) = supervisor {
            let cred = getsockopt(&sock, sockopt::PeerCredentials).map_err(|e| sock_err("checking", dir, e))?;
            if cred.pid() != sup.pid {
                return Err(SandboxError::Supervisor(format!(
                    "{} is served by pid {}, not by the sandbox's supervisor (pid {})",
                    dir.join("sock").display(),
                    cred.pid(),
                    sup.pid
                )));
            }
        }
        Ok(Client { sock, dir: dir.to_path_buf() })
    }

    pub fn send(&self, req: &Request) -> Result<(), SandboxError> {
        send(self.sock.as_fd(), req, &[]).map_err(|e| sock_err("writing to", &self.dir, e))
    }

    /// The next reply; an error if the supervisor hung up.
    pub fn reply(&self) -> Result<(Reply, Vec<OwnedFd>), SandboxError> {
        match recv::<Reply>(self.sock.as_fd()) {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(SandboxError::Supervisor(format!(
                "the supervisor closed {} without answering (the sandbox is being destroyed?)",
                self.dir.join("sock").display()
            ))),
            Err(e) => Err(sock_err("reading from", &self.dir, e)),
        }
    }

    /// Bounds how long `reply` waits (a stopped supervisor never answers).
    pub fn timeout(self, t: std::time::Duration) -> Self {
        let tv = nix::sys::time::TimeVal::new(t.as_secs() as i64, t.subsec_micros() as i64);
        let _ = nix::sys::socket::setsockopt(&self.sock, sockopt::ReceiveTimeout, &tv);
        self
    }

    pub fn call(&self, req: &Request) -> Result<(Reply, Vec<OwnedFd>), SandboxError> {
        self.send(req)?;
        self.reply()
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A husk exec of the previous version announced its id as
    /// `runsc_exec`: the supervisor still gets it (and can end the command
    /// when that husk exec dies), and the new name is what is sent.
    #[test]
    fn exec_id_is_read_under_its_former_name() {
        let old: Request = serde_json::from_str(r#"{"op":"exec","wait":false,"runsc_exec":"abc"}"#).unwrap();
        assert_eq!(
            old,
            Request::Exec {
                wait: false,
                exec_id: Some("abc".into()),
                warm: false,
                ready_check: false,
                timeout_ms: None
            }
        );
        let sent = serde_json::to_string(&Request::Exec {
            wait: false,
            exec_id: Some("abc".into()),
            warm: false,
            ready_check: false,
            timeout_ms: None,
        })
        .unwrap();
        assert_eq!(sent, r#"{"op":"exec","wait":false,"exec_id":"abc"}"#);
    }

    #[test]
    fn requests_and_replies_round_trip_with_fds() {
        let t = std::env::temp_dir().join(format!("husk-proto-{}-{}", std::process::id(), "x".repeat(80)));
        std::fs::create_dir_all(&t).unwrap();
        let l = listen_at(&t).unwrap();
        let c = Client::connect(&t, ProcRef::of(std::process::id() as i32)).unwrap();
        let s = accept(l.as_fd()).unwrap().unwrap();
        c.send(&Request::Exec { wait: true, exec_id: None, warm: false, ready_check: false, timeout_ms: None })
            .unwrap();
        let (req, fds) = recv::<Request>(s.as_fd()).unwrap().unwrap();
        assert_eq!(
            (req, fds.len()),
            (Request::Exec { wait: true, exec_id: None, warm: false, ready_check: false, timeout_ms: None }, 0)
        );
        let (r, w) = nix::unistd::pipe().unwrap();
        let reply = Reply { ok: true, exec: 3, namespaces: vec!["user".into()], ..Default::default() };
        send(s.as_fd(), &reply, &[w.as_raw_fd()]).unwrap();
        let (got, fds) = c.reply().unwrap();
        assert_eq!((got.ok, got.exec, got.namespaces), (true, 3, vec!["user".to_string()]));
        nix::unistd::write(&fds[0], b"z").unwrap();
        let mut b = [0u8; 1];
        nix::unistd::read(&r, &mut b).unwrap();
        assert_eq!(&b, b"z");
        drop(s);
        assert!(c.reply().is_err(), "a hang-up is an error for the client");
        std::fs::remove_dir_all(&t).unwrap();
    }
}
