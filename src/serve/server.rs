//! The accept loop: one thread, one forked process per connection.
//!
//! Why processes and not threads: an exec forks a joiner into the sandbox,
//! and a fork-like clone is sound only in a single-threaded process
//! (`sys::process::SingleThreaded`). A threaded server would have to start
//! `husk exec` as a new program for every request (about 1.5 ms of
//! start-up); a forked copy of this process is ready at once, runs the
//! exec with the same code as the CLI, and ends with its connection, so
//! nothing a request did (a leaked fd, a stuck read) outlives it. The loop
//! itself only accepts, reads request heads, counts children
//! (`--max-concurrent`, 429 beyond) and reaps them; it holds no state about
//! sandboxes. Whoever runs the loop may give it `Chores` (serve's pools):
//! an fd and a timer to wake for, and children of its own that the reaping
//! must not count as connections.
//!
//! A connection takes a request slot (a process) only once its whole head
//! has arrived and the `Gate` let it through: until then it is `Pending`,
//! an fd and a buffer the loop polls, bounded by `Settings::max_pending`
//! (the oldest is dropped for a newer one) and `Settings::head_deadline`.
//! So clients that connect and send nothing, or half a head (slowloris),
//! cost no slot, and over TCP nobody without the token ever gets one.

use crate::sys::process::{Forked, SingleThreaded, ThreadsError};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// An accepted connection.
pub enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    /// Bounds every read and write on the connection (a client that stops
    /// reading or sending holds its slot no longer than this).
    pub fn set_timeouts(&self, d: Duration) {
        let _ = match self {
            Conn::Unix(s) => s.set_read_timeout(Some(d)).and_then(|_| s.set_write_timeout(Some(d))),
            Conn::Tcp(s) => s.set_read_timeout(Some(d)).and_then(|_| s.set_write_timeout(Some(d))),
        };
    }

    /// The connecting process's uid (unix sockets only).
    pub fn peer_uid(&self) -> Option<u32> {
        match self {
            Conn::Unix(s) => {
                nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials).ok().map(|c| c.uid())
            }
            Conn::Tcp(_) => None,
        }
    }

    pub fn is_tcp(&self) -> bool {
        matches!(self, Conn::Tcp(_))
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Conn::Unix(s) => s.as_fd(),
            Conn::Tcp(s) => s.as_fd(),
        }
    }

    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Conn::Unix(s) => s.as_raw_fd(),
            Conn::Tcp(s) => s.as_raw_fd(),
        }
    }

    /// Ends the sending side: the client sees the end of the response
    /// even while some other process still holds the socket.
    pub fn finish(&self) {
        let _ = match self {
            Conn::Unix(s) => s.shutdown(std::net::Shutdown::Write),
            Conn::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
        };
    }

    fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Conn::Unix(s) => s.set_nonblocking(on),
            Conn::Tcp(s) => s.set_nonblocking(on),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(b),
            Conn::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(b),
            Conn::Tcp(s) => s.write(b),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A bound listening socket.
pub enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl Listener {
    fn accept(&self) -> std::io::Result<Conn> {
        match self {
            Listener::Unix(l) => l.accept().map(|(s, _)| Conn::Unix(s)),
            Listener::Tcp(l) => l.accept().map(|(s, _)| Conn::Tcp(s)),
        }
    }

    fn set_nonblocking(&self) -> std::io::Result<()> {
        match self {
            Listener::Unix(l) => l.set_nonblocking(true),
            Listener::Tcp(l) => l.set_nonblocking(true),
        }
    }

    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Listener::Unix(l) => l.as_fd(),
            Listener::Tcp(l) => l.as_fd(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("setting up signal handling: {0}")]
    Signals(nix::errno::Errno),
    #[error("waiting for connections: {0}")]
    Poll(nix::errno::Errno),
    #[error("forking a connection's process: {0}")]
    Fork(nix::errno::Errno),
    #[error(transparent)]
    Threads(#[from] ThreadsError),
    #[error("making the listener non-blocking: {0}")]
    Listener(std::io::Error),
}

impl ServeError {
    pub fn errno(&self) -> Option<nix::errno::Errno> {
        match self {
            ServeError::Signals(e) | ServeError::Poll(e) | ServeError::Fork(e) => Some(*e),
            ServeError::Threads(e) => e.errno(),
            ServeError::Listener(e) => e.raw_os_error().map(nix::errno::Errno::from_raw),
        }
    }
}

/// How `run` returned.
pub enum Ended {
    /// The server was told to stop (SIGTERM, SIGINT, SIGHUP).
    Stopped(Signal),
    /// We are a connection's process: serve it, then exit. The bytes are
    /// what the loop read of it: the whole request head, perhaps the
    /// body's start.
    Connection(Conn, Vec<u8>, SingleThreaded),
}

/// What the loop answers by itself, without forking: a connection beyond
/// `max_concurrent`.
pub type Refusal = fn() -> (u16, Vec<u8>);

/// Decides, in the loop, whether a connection whose head has arrived may
/// take a slot: `Err((status, body))` answers it there instead (a TCP
/// request without the bearer token).
pub type Gate<'a> = &'a dyn Fn(&Conn, &[u8]) -> Result<(), (u16, Vec<u8>)>;

/// The loop's bounds.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Connections served at once (each a process).
    pub max_concurrent: usize,
    /// Connections whose head is still arriving.
    pub max_pending: usize,
    /// How long a connection may take to send its whole head.
    pub head_deadline: Duration,
    /// The longest head (`http::Limits::max_head`): a connection that sent
    /// more without ending it is handed on, to be answered 431.
    pub max_head: usize,
    /// What the loop answers a head that is late (408).
    pub late: Refusal,
    /// What the loop answers beyond `max_concurrent` (429).
    pub busy: Refusal,
}

/// A connection whose head is still arriving.
struct Pending {
    conn: Conn,
    buf: Vec<u8>,
    deadline: Instant,
}

/// What reading a pending connection found.
enum Progress {
    /// Still arriving.
    Waiting,
    /// The head is complete (or too long to be one): hand it on.
    Head,
    /// Closed or broken: drop it.
    Gone,
}

impl Pending {
    /// Reads what has arrived, without waiting.
    fn read(&mut self, max_head: usize) -> Progress {
        let mut chunk = [0u8; 4096];
        loop {
            match self.conn.read(&mut chunk) {
                Ok(0) => return Progress::Gone,
                Ok(n) => {
                    let from = self.buf.len().saturating_sub(3);
                    self.buf.extend_from_slice(&chunk[..n]);
                    if self.buf[from..].windows(4).any(|w| w == b"\r\n\r\n") || self.buf.len() > max_head + 4 {
                        return Progress::Head;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Progress::Waiting,
                Err(_) => return Progress::Gone,
            }
        }
    }
}

/// Work the loop's owner does between connections, in the loop's process:
/// woken by its own fd or its timer, and told about its own children.
pub trait Chores {
    /// An fd to wake for (a pipe connection processes write to).
    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>>;
    /// The longest the loop may sleep before `tend` runs again.
    fn timeout(&self) -> Option<Duration>;
    /// Runs after every wake-up, before connections are accepted: what a
    /// connection's process forked after this sees includes it.
    fn tend(&mut self);
    /// A reaped child: true if it was one of the chores' (not a connection).
    fn reaped(&mut self, pid: i32, status: libc::c_int) -> bool;
}

const STOP: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

/// Accepts until a stop signal. In a connection's process, returns
/// `Ended::Connection` with the listener and the signal handling gone (the
/// signal mask cleared, as a CLI husk starts).
pub fn run(
    listener: Listener,
    settings: Settings,
    gate: Gate<'_>,
    chores: &mut dyn Chores,
) -> Result<Ended, ServeError> {
    let mut set = SigSet::empty();
    for s in STOP {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    crate::sys::signal::block(&set).map_err(ServeError::Signals)?;
    let sigfd =
        SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).map_err(ServeError::Signals)?;
    listener.set_nonblocking().map_err(ServeError::Listener)?;
    let mut active = 0usize;
    let mut pending: Vec<Pending> = Vec::new();
    // Fixed slots in the poll set; the pending connections follow.
    const LISTENER: usize = 0;
    const SIGNALS: usize = 1;
    loop {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds =
            vec![PollFd::new(listener.fd(), PollFlags::POLLIN), PollFd::new(sigfd.as_fd(), PollFlags::POLLIN)];
        let chores_fd = chores.fd();
        let first_pending = 2 + usize::from(chores_fd.is_some());
        fds.extend(chores_fd.map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
        fds.extend(pending.iter().map(|p| PollFd::new(p.conn.fd(), PollFlags::POLLIN)));
        let now = Instant::now();
        let wake = [chores.timeout(), pending.iter().map(|p| p.deadline.saturating_duration_since(now)).min()]
            .into_iter()
            .flatten()
            .min();
        let timeout = wake
            .map(|d| PollTimeout::try_from(d.as_millis().min(60_000) as u64 + 1).unwrap_or(PollTimeout::MAX))
            .unwrap_or(PollTimeout::NONE);
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ServeError::Poll(e)),
        }
        let ready = |i: usize| fds[i].revents().is_some_and(|r| !r.is_empty());
        let signals_ready = ready(SIGNALS);
        let conns_ready = ready(LISTENER);
        let readable: Vec<bool> = (0..pending.len()).map(|i| ready(first_pending + i)).collect();
        drop(fds);
        if signals_ready {
            while let Ok(Some(info)) = sigfd.read_signal() {
                let sig = Signal::try_from(info.ssi_signo as i32).unwrap_or(Signal::SIGTERM);
                if STOP.contains(&sig) {
                    reap(&mut active, chores);
                    return Ok(Ended::Stopped(sig));
                }
            }
            reap(&mut active, chores);
        }
        chores.tend();
        let mut heads = Vec::new();
        let now = Instant::now();
        let mut i = 0;
        let mut k = 0;
        while i < pending.len() {
            let progress = if readable[k] { pending[i].read(settings.max_head) } else { Progress::Waiting };
            k += 1;
            match progress {
                Progress::Head => heads.push(pending.remove(i)),
                Progress::Gone => drop(pending.remove(i)),
                Progress::Waiting if now >= pending[i].deadline => answer(pending.remove(i).conn, settings.late),
                Progress::Waiting => i += 1,
            }
        }
        if conns_ready {
            loop {
                let conn = match listener.accept() {
                    Ok(c) => c,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    // A connection that was reset before we took it, or fds
                    // running out: the listener stays, the next one may work.
                    Err(_) => break,
                };
                if conn.set_nonblocking(true).is_err() {
                    continue;
                }
                // The oldest gives way: a client that sends its head at once
                // (every real one) is read before a flood of newer idle
                // connections can push it out.
                if pending.len() >= settings.max_pending.max(1) {
                    drop(pending.remove(0));
                }
                let mut p = Pending { conn, buf: Vec::new(), deadline: Instant::now() + settings.head_deadline };
                match p.read(settings.max_head) {
                    Progress::Head => heads.push(p),
                    Progress::Waiting => pending.push(p),
                    Progress::Gone => {}
                }
            }
        }
        for p in heads {
            if let Err((status, body)) = gate(&p.conn, &p.buf) {
                respond(p.conn, status, &body);
                continue;
            }
            reap(&mut active, chores);
            if active >= settings.max_concurrent {
                answer(p.conn, settings.busy);
                continue;
            }
            let one = SingleThreaded::check()?;
            match crate::sys::process::fork(&one).map_err(ServeError::Fork)? {
                Forked::Child(token) => {
                    drop(sigfd);
                    drop(listener);
                    drop(pending);
                    crate::sys::signal::set_mask(&SigSet::empty()).map_err(ServeError::Signals)?;
                    // The connection's process reads the body with blocking
                    // reads bounded by timeouts.
                    let _ = p.conn.set_nonblocking(false);
                    return Ok(Ended::Connection(p.conn, p.buf, token));
                }
                Forked::Parent { .. } => {
                    active += 1;
                    drop(p);
                }
            }
        }
    }
}

fn reap(active: &mut usize, chores: &mut dyn Chores) {
    while let Ok(Some((pid, status))) = crate::sys::process::reap_any_nohang() {
        if !chores.reaped(pid.as_raw(), status) {
            *active = active.saturating_sub(1);
        }
    }
}

/// Answers a connection in the loop, without forking.
fn answer(conn: Conn, refusal: Refusal) {
    let (status, body) = refusal();
    respond(conn, status, &body);
}

/// Writes a short answer without waiting (it fits the socket's buffer; a
/// client that does not read loses it). What the client already sent is
/// read first: closing a socket with unread data resets it, and the
/// client would see the reset instead of the answer.
fn respond(mut conn: Conn, status: u16, body: &[u8]) {
    let _ = conn.set_nonblocking(true);
    let mut sink = [0u8; 16 * 1024];
    for _ in 0..4 {
        match conn.read(&mut sink) {
            Ok(n) if n > 0 => continue,
            _ => break,
        }
    }
    let _ = crate::serve::http::write_response(&mut conn, status, "application/json", body);
    conn.finish();
}
