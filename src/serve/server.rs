//! The accept loop: one thread, one forked process per connection.
//!
//! Why processes and not threads: an exec forks a joiner into the sandbox,
//! and a fork-like clone is sound only in a single-threaded process
//! (`sys::process::SingleThreaded`). A threaded server would have to start
//! `husk exec` as a new program for every request (about 1.5 ms of
//! start-up); a forked copy of this process is ready at once, runs the
//! exec with the same code as the CLI, and ends with its connection, so
//! nothing a request did (a leaked fd, a stuck read) outlives it. The loop
//! itself only accepts, counts children (`--max-concurrent`, 429 beyond)
//! and reaps them; it holds no state about sandboxes. Whoever runs the loop
//! may give it `Chores` (serve's pools): an fd and a timer to wake for, and
//! children of its own that the reaping must not count as connections.

use crate::sys::process::{Forked, SingleThreaded, ThreadsError};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

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

    fn set_nonblocking(&self) {
        let _ = match self {
            Conn::Unix(s) => s.set_nonblocking(true),
            Conn::Tcp(s) => s.set_nonblocking(true),
        };
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
    /// We are a connection's process: serve it, then exit.
    Connection(Conn, SingleThreaded),
}

/// What the loop answers by itself, without forking: a connection beyond
/// `max_concurrent`.
pub type Refusal = fn() -> (u16, Vec<u8>);

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
    max_concurrent: usize,
    refusal: Refusal,
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
    loop {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds =
            vec![PollFd::new(listener.fd(), PollFlags::POLLIN), PollFd::new(sigfd.as_fd(), PollFlags::POLLIN)];
        fds.extend(chores.fd().map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
        let timeout = chores
            .timeout()
            .map(|d| PollTimeout::try_from(d.as_millis().min(60_000) as u64 + 1).unwrap_or(PollTimeout::MAX))
            .unwrap_or(PollTimeout::NONE);
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ServeError::Poll(e)),
        }
        let signals_ready = fds[1].revents().is_some_and(|r| !r.is_empty());
        let conns_ready = fds[0].revents().is_some_and(|r| !r.is_empty());
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
        if !conns_ready {
            continue;
        }
        loop {
            let conn = match listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // A connection that was reset before we took it, or fds
                // running out: the listener stays, the next one may work.
                Err(_) => break,
            };
            reap(&mut active, chores);
            if active >= max_concurrent {
                refuse(conn, refusal);
                continue;
            }
            let one = SingleThreaded::check()?;
            match crate::sys::process::fork(&one).map_err(ServeError::Fork)? {
                Forked::Child(token) => {
                    drop(sigfd);
                    drop(listener);
                    crate::sys::signal::set_mask(&SigSet::empty()).map_err(ServeError::Signals)?;
                    return Ok(Ended::Connection(conn, token));
                }
                Forked::Parent { .. } => {
                    active += 1;
                    drop(conn);
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

/// Answers a connection beyond the limit without forking. What the client
/// already sent is read first (without waiting): closing a socket with
/// unread data resets it, and the client would see the reset instead of
/// the answer.
fn refuse(mut conn: Conn, refusal: Refusal) {
    conn.set_nonblocking();
    let mut sink = [0u8; 16 * 1024];
    for _ in 0..4 {
        match conn.read(&mut sink) {
            Ok(n) if n > 0 => continue,
            _ => break,
        }
    }
    let (status, body) = refusal();
    let _ = crate::serve::http::write_response(&mut conn, status, "application/json", &body);
    conn.finish();
}
