//! Moving a granted connection's bytes both ways, with splice(2) through a
//! pipe per direction: the payload goes socket -> pipe -> socket inside the
//! kernel, never through the proxy's memory. On a 2-CPU host under load
//! the copy through a user buffer cost a third of a 200 MB download's
//! throughput (scripts/bench-network.sh); the proxy only needs the counts.
//! Where no pipe can be had (the fd limit), the same loop copies through a
//! buffer.

use crate::sys::net::splice_move;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

/// Most bytes moved per step and direction (the pipe is sized to it).
const CHUNK: usize = 256 * 1024;

/// What the relay reports and asks as it goes.
pub trait Meter {
    /// How many more bytes may pass before the cap is crossed (None: no
    /// cap). The relay moves at most one byte more, to see it crossed.
    fn allowance(&self) -> Option<u64>;
    /// `n` bytes came from the client (`up`) or the upstream; false when
    /// that crossed the cap: they are not sent on and the relay ends.
    fn moved(&self, up: bool, n: u64) -> bool;
}

/// One direction's way through the kernel, or a buffer.
enum Path {
    Pipe { r: OwnedFd, w: OwnedFd },
    Copy(Vec<u8>),
}

impl Path {
    fn new(pipes: bool) -> Path {
        if !pipes {
            return Path::Copy(vec![0u8; 32 * 1024]);
        }
        match nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK) {
            Ok((r, w)) => {
                // A bigger pipe: fewer steps per megabyte. Kept at the
                // default if the kernel says no (pipe-max-size).
                let _ = nix::fcntl::fcntl(w.as_fd(), nix::fcntl::FcntlArg::F_SETPIPE_SZ(CHUNK as i32));
                Path::Pipe { r, w }
            }
            Err(_) => Path::Copy(vec![0u8; 32 * 1024]),
        }
    }

    /// Moves what `from` has (at most `max`) to `to`. Ok(0) at EOF.
    /// `Err(())`: a side failed, or the cap was crossed.
    fn step(&mut self, from: &TcpStream, to: &TcpStream, max: usize, up: bool, m: &impl Meter) -> Result<usize, ()> {
        match self {
            Path::Pipe { r, w } => {
                let n = loop {
                    match splice_move(from.as_fd(), w.as_fd(), max) {
                        Ok(n) => break n,
                        Err(Errno::EINTR) => continue,
                        // Readable said poll, yet nothing: try again later.
                        Err(Errno::EAGAIN) => return Ok(usize::MAX),
                        Err(_) => return Ok(0),
                    }
                };
                if n == 0 {
                    return Ok(0);
                }
                if !m.moved(up, n as u64) {
                    return Err(());
                }
                let mut left = n;
                while left > 0 {
                    match splice_move(r.as_fd(), to.as_fd(), left) {
                        Ok(0) => return Err(()),
                        Ok(k) => left -= k,
                        Err(Errno::EINTR) => {}
                        Err(_) => return Err(()),
                    }
                }
                Ok(n)
            }
            Path::Copy(buf) => {
                let len = max.min(buf.len());
                let n = match (&mut &*from).read(&mut buf[..len]) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(usize::MAX),
                    Err(_) => 0,
                };
                if n == 0 {
                    return Ok(0);
                }
                if !m.moved(up, n as u64) || (&mut &*to).write_all(&buf[..n]).is_err() {
                    return Err(());
                }
                Ok(n)
            }
        }
    }
}

/// Relays until both directions reached EOF, a side failed, the cap was
/// crossed, or nothing moved either way for `idle`. `pipes`: splice
/// through two pipes (four more fds), else copy.
pub fn relay(client: &TcpStream, upstream: &TcpStream, idle: Duration, pipes: bool, m: &impl Meter) {
    let mut paths = [Path::new(pipes), Path::new(pipes)]; // client->upstream, upstream->client
    let mut open = [true, true];
    let timeout = PollTimeout::try_from(idle.as_millis().min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX);
    while open[0] || open[1] {
        let mut fds =
            [PollFd::new(client.as_fd(), PollFlags::empty()), PollFd::new(upstream.as_fd(), PollFlags::empty())];
        for (fd, o) in fds.iter_mut().zip(open) {
            if o {
                fd.set_events(PollFlags::POLLIN);
            }
        }
        match poll(&mut fds, timeout) {
            Ok(0) => return, // idle
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(_) => return,
        }
        let ready = [fds[0].revents().unwrap_or(PollFlags::empty()), fds[1].revents().unwrap_or(PollFlags::empty())];
        for dir in 0..2 {
            if !open[dir] || ready[dir].is_empty() {
                continue;
            }
            let (from, to) = if dir == 0 { (client, upstream) } else { (upstream, client) };
            let max = m.allowance().map_or(CHUNK, |a| CHUNK.min(usize::try_from(a).unwrap_or(CHUNK).saturating_add(1)));
            match paths[dir].step(from, to, max, dir == 0, m) {
                Ok(0) => {
                    open[dir] = false;
                    let _ = to.shutdown(std::net::Shutdown::Write);
                }
                Ok(_) => {}
                Err(()) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Count {
        cap: Option<u64>,
        up: AtomicU64,
        down: AtomicU64,
    }

    impl Meter for Count {
        fn allowance(&self) -> Option<u64> {
            let used = self.up.load(Ordering::SeqCst) + self.down.load(Ordering::SeqCst);
            self.cap.map(|c| c.saturating_sub(used))
        }
        fn moved(&self, up: bool, n: u64) -> bool {
            (if up { &self.up } else { &self.down }).fetch_add(n, Ordering::SeqCst);
            self.allowance() != Some(0) || self.cap.is_none()
        }
    }

    /// (the relay's client side, the client), (the relay's upstream side,
    /// the server), all on loopback.
    fn pairs() -> ((TcpStream, TcpStream), (TcpStream, TcpStream)) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let pair = || {
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (l.accept().unwrap().0, c)
        };
        (pair(), pair())
    }

    #[test]
    fn bytes_go_both_ways_and_are_counted() {
        for pipes in [true, false] {
            both_ways(pipes);
        }
    }

    fn both_ways(pipes: bool) {
        let ((rc, mut client), (mut server, ru)) = pairs();
        let m = Count { cap: None, up: AtomicU64::new(0), down: AtomicU64::new(0) };
        let t = std::thread::spawn(move || {
            let mut got = vec![0u8; 5];
            server.read_exact(&mut got).unwrap();
            server.write_all(&vec![7u8; 3 << 20]).unwrap();
            server.shutdown(std::net::Shutdown::Write).unwrap();
            got
        });
        client.write_all(b"hello").unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            client.read_to_end(&mut all).unwrap();
            all.len()
        });
        relay(&rc, &ru, Duration::from_secs(30), pipes, &m);
        assert_eq!(t.join().unwrap(), b"hello");
        assert_eq!(reader.join().unwrap(), 3 << 20);
        assert_eq!((m.up.load(Ordering::SeqCst), m.down.load(Ordering::SeqCst)), (5, 3 << 20));
    }

    #[test]
    fn the_cap_ends_the_relay_past_it() {
        let ((rc, mut client), (mut server, ru)) = pairs();
        let m = Count { cap: Some(100_000), up: AtomicU64::new(0), down: AtomicU64::new(0) };
        let t = std::thread::spawn(move || {
            let _ = server.write_all(&vec![7u8; 4 << 20]);
        });
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = client.read_to_end(&mut all);
            all.len()
        });
        relay(&rc, &ru, Duration::from_secs(30), true, &m);
        drop((rc, ru));
        assert!(reader.join().unwrap() <= 100_000);
        let _ = t.join();
    }
}
