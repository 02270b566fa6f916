//! `--publish [HOSTIP:]HOSTPORT:PORT`: a server inside the sandbox,
//! reached from the host. The host side listens (127.0.0.1 unless a host
//! IP is given); each connection it accepts is forwarded to 127.0.0.1:PORT
//! in the sandbox's network namespace.
//!
//! The way in mirrors the egress listeners: a socket belongs to the
//! network namespace it was made in, wherever it is used afterwards. So
//! the sandbox's init forks a socket factory inside the namespace (step
//! `publish_factory`, after the root is pivoted and with every capability
//! dropped) that holds one end of a socket pair and answers each request
//! with a fresh, unconnected TCP socket (SCM_RIGHTS). The forwarder (`husk
//! publish-forwarder`, a process of its own like the egress proxy) connects
//! that socket to 127.0.0.1:PORT — inside the sandbox — and relays.
//! Entering the namespace instead (setns) would need CAP_SYS_ADMIN over
//! it, which a rootless husk has only after joining the sandbox's user
//! namespace too (single-threaded, per connection); the factory needs no
//! privilege and works the same for root and rootless, `run` and `create`.
//! The factory can only make sockets in the namespace the sandbox already
//! has; what it hands back is checked (an AF_INET/AF_INET6 stream socket)
//! before use.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The hidden subcommand the forwarder runs as.
pub const SUBCOMMAND: &str = "publish-forwarder";
/// Connections forwarded at once (more are closed at accept).
pub const MAX_CONNECTIONS: usize = 256;

/// One `--publish`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishSpec {
    pub host_ip: IpAddr,
    /// 0: the host picks one (reported).
    pub host_port: u16,
    pub port: u16,
}

/// A published port as bound (the verdict's and the record's `published`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    pub host_ip: IpAddr,
    pub host_port: u16,
    pub port: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(
        "invalid --publish {0:?}: expected [HOSTIP:]HOSTPORT:PORT (e.g. 8080:80, 127.0.0.1:0:8888, [::1]:8080:80); PORT 1-65535, HOSTPORT 0 picks one"
    )]
    Syntax(String),
    #[error("--publish {spec}: cannot listen on {addr}: {source}")]
    Bind { spec: String, addr: SocketAddr, source: std::io::Error },
    #[error("--publish: the same host address {0} twice")]
    Twice(SocketAddr),
    #[error("starting the publish forwarder: {0}")]
    Start(std::io::Error),
}

impl PublishSpec {
    /// `[HOSTIP:]HOSTPORT:PORT`, IPv6 host addresses in brackets.
    pub fn parse(s: &str) -> Result<PublishSpec, PublishError> {
        let bad = || PublishError::Syntax(s.to_string());
        let (ip, rest) = if let Some(r) = s.strip_prefix('[') {
            let (ip, rest) = r.split_once("]:").ok_or_else(bad)?;
            (Some(ip), rest)
        } else {
            match s.matches(':').count() {
                1 => (None, s),
                2 => s.split_once(':').map(|(ip, r)| (Some(ip), r)).ok_or_else(bad)?,
                _ => return Err(bad()),
            }
        };
        let host_ip = match ip {
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Some(ip) => ip.parse().map_err(|_| bad())?,
        };
        let (hp, p) = rest.split_once(':').ok_or_else(bad)?;
        let host_port: u16 = hp.parse().map_err(|_| bad())?;
        let port: u16 = p.parse().map_err(|_| bad())?;
        if port == 0 {
            return Err(bad());
        }
        Ok(PublishSpec { host_ip, host_port, port })
    }

    fn text(&self) -> String {
        match self.host_ip {
            IpAddr::V6(ip) => format!("[{ip}]:{}:{}", self.host_port, self.port),
            IpAddr::V4(ip) => format!("{ip}:{}:{}", self.host_port, self.port),
        }
    }
}

/// What the forwarder reads on stdin (one line).
#[derive(Serialize, Deserialize)]
struct ForwarderConfig {
    /// (listening fd, port inside)
    ports: Vec<(i32, u16)>,
    factory_fd: i32,
}

/// The running forwarder; it dies with its parent (PDEATHSIG) or on drop.
pub struct Forwarder {
    child: std::process::Child,
    pub published: Vec<Published>,
}

impl Forwarder {
    /// Binds the host side of every `--publish` and starts the forwarder
    /// with those listeners and the sandbox's socket factory.
    pub fn start(specs: &[PublishSpec], factory: OwnedFd) -> Result<Forwarder, PublishError> {
        let mut listeners = Vec::new();
        let mut published = Vec::new();
        for s in specs {
            let addr = SocketAddr::new(s.host_ip, s.host_port);
            let l = TcpListener::bind(addr).map_err(|e| PublishError::Bind { spec: s.text(), addr, source: e })?;
            let bound = l.local_addr().map_err(PublishError::Start)?;
            if published.iter().any(|p: &Published| p.host_ip == bound.ip() && p.host_port == bound.port()) {
                return Err(PublishError::Twice(bound));
            }
            published.push(Published { host_ip: bound.ip(), host_port: bound.port(), port: s.port });
            listeners.push((OwnedFd::from(l), s.port));
        }
        for fd in listeners.iter().map(|(l, _)| l.as_fd()).chain([factory.as_fd()]) {
            crate::sys::net::keep_across_exec(fd).map_err(|e| PublishError::Start(e.into()))?;
        }
        let cfg = ForwarderConfig {
            ports: listeners.iter().map(|(l, p)| (l.as_raw_fd(), *p)).collect(),
            factory_fd: factory.as_raw_fd(),
        };
        let mut cmd = std::process::Command::new("/proc/self/exe");
        cmd.arg(SUBCOMMAND)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit());
        crate::sys::command::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(PublishError::Start)?;
        drop((listeners, factory));
        let mut line = serde_json::to_vec(&cfg).unwrap_or_default();
        line.push(b'\n');
        let sent = child.stdin.take().map(|mut i| i.write_all(&line));
        if !matches!(sent, Some(Ok(()))) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PublishError::Start(std::io::Error::other("the forwarder exited at start")));
        }
        Ok(Forwarder { child, published })
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asks the factory for a socket in the sandbox's namespace.
fn fresh_socket(factory: &Mutex<OwnedFd>, v6: bool) -> Option<OwnedFd> {
    let f = factory.lock().ok()?;
    let ask = [if v6 { 6u8 } else { 4u8 }];
    nix::sys::socket::send(f.as_raw_fd(), &ask, nix::sys::socket::MsgFlags::MSG_NOSIGNAL).ok()?;
    let fd = recv_fd(&f)?;
    // Only a TCP socket of the internet families is connected below.
    use nix::sys::socket::{SockType, SockaddrLike, getsockname, getsockopt, sockopt};
    let ok_type = getsockopt(&fd, sockopt::SockType).is_ok_and(|t| t == SockType::Stream);
    let family = getsockname::<nix::sys::socket::SockaddrStorage>(fd.as_raw_fd()).ok().and_then(|a| a.family());
    let want = if v6 { nix::sys::socket::AddressFamily::Inet6 } else { nix::sys::socket::AddressFamily::Inet };
    (ok_type && family == Some(want)).then_some(fd)
}

/// One reply of the factory: the socket it attached (none: it failed).
fn recv_fd(f: &OwnedFd) -> Option<OwnedFd> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut buf = [0u8; 1];
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    loop {
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let msg = match recvmsg::<()>(f.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
            Ok(m) => m,
        };
        let mut got = None;
        for c in msg.cmsgs().ok()? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // Just installed in our table by the kernel: ours to own
                // (extra ones are closed when dropped).
                for fd in raw {
                    let owned = crate::sys::fd::owned(fd as libc::c_long);
                    got.get_or_insert(owned);
                }
            }
        }
        return got;
    }
}

fn forward(client: TcpStream, inside: OwnedFd, port: u16) {
    use nix::sys::socket::{SockaddrIn, connect};
    if connect(inside.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, port)).is_err() {
        return;
    }
    let inside = TcpStream::from(inside);
    let (Ok(c2), Ok(i2)) = (client.try_clone(), inside.try_clone()) else { return };
    let up = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || pipe(c2, i2));
    pipe(inside, client);
    if let Ok(t) = up {
        let _ = t.join();
    }
}

/// Copies `from` to `to` until EOF, then half-closes `to`.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
    let _ = from.shutdown(std::net::Shutdown::Read);
}

/// `husk publish-forwarder`: the configuration line on stdin, the
/// listeners and the factory at the fds it names. Exit 125 on a bad start;
/// otherwise it runs until killed (PDEATHSIG, or its owner's drop).
pub fn main() -> i32 {
    let mut line = String::new();
    let mut stdin = std::io::BufReader::new(std::io::stdin());
    if (&mut stdin).take(1 << 20).read_line(&mut line).is_err() {
        eprintln!("husk publish-forwarder: cannot read the configuration on stdin");
        return 125;
    }
    let cfg: ForwarderConfig = match serde_json::from_str(&line) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("husk publish-forwarder: bad configuration: {e}");
            return 125;
        }
    };
    let factory = match crate::sys::net::inherited_socket(cfg.factory_fd) {
        Ok(f) => std::sync::Arc::new(Mutex::new(f)),
        Err(e) => {
            eprintln!("husk publish-forwarder: fd {} is not a socket: {e}", cfg.factory_fd);
            return 125;
        }
    };
    let active = std::sync::Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for (fd, port) in cfg.ports {
        let l = match crate::sys::net::inherited_listener(fd) {
            Ok(fd) => TcpListener::from(fd),
            Err(e) => {
                eprintln!("husk publish-forwarder: fd {fd} is not a listening socket: {e}");
                return 125;
            }
        };
        let (factory, active) = (factory.clone(), active.clone());
        let t = std::thread::Builder::new().stack_size(128 * 1024).spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                    active.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                let Some(inside) = fresh_socket(&factory, false) else {
                    active.fetch_sub(1, Ordering::SeqCst);
                    continue;
                };
                let done = active.clone();
                let spawned = std::thread::Builder::new().stack_size(128 * 1024).spawn(move || {
                    forward(c, inside, port);
                    done.fetch_sub(1, Ordering::SeqCst);
                });
                if spawned.is_err() {
                    active.fetch_sub(1, Ordering::SeqCst);
                }
            }
        });
        match t {
            Ok(t) => threads.push(t),
            Err(_) => return 125,
        }
    }
    for t in threads {
        let _ = t.join();
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_takes_docker_shapes_and_refuses_the_rest() {
        let p = |s: &str| PublishSpec::parse(s).map(|p| (p.host_ip.to_string(), p.host_port, p.port));
        assert_eq!(p("8080:80").unwrap(), ("127.0.0.1".into(), 8080, 80));
        assert_eq!(p("0.0.0.0:0:8888").unwrap(), ("0.0.0.0".into(), 0, 8888));
        assert_eq!(p("[::1]:8080:80").unwrap(), ("::1".into(), 8080, 80));
        for bad in ["80", "a:80", "8080:0", "1.2.3.4:80", "x:1:2", "::1:8080:80", "8080:80/udp", "70000:80", ""] {
            assert!(PublishSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
