//! The egress proxy: `husk egress-proxy`, a process of its own that holds
//! the two listening sockets the sandbox's init made inside the sandbox's
//! network namespace (HTTP on 3128, SOCKS5 on 1080, both 127.0.0.1 there)
//! and makes the outbound connections from the host's namespace, after the
//! policy said yes. One thread per client connection (bounded by
//! `max_connections`), each relaying both directions with poll.
//!
//! It is a separate process so the run's supervisor stays single-threaded
//! and a proxy bug cannot take it down; it dies with its parent
//! (PDEATHSIG) and, at SIGTERM, writes its accounting as one JSON object
//! on stdout and exits.

use super::account::{Ledger, NetworkReport};
use super::http::{self, Authority, Request};
use super::rules::{Policy, is_internal};
use super::{ProxyConfig, relay, socks, tls};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A client has this long to send its request (HTTP head, SOCKS greeting
/// and request, the ClientHello of a tunnel).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

struct Shared {
    policy: Policy,
    pins: HashMap<String, Vec<IpAddr>>,
    own: Vec<IpAddr>,
    ledger: Mutex<Ledger>,
    active: AtomicUsize,
    bytes: AtomicU64,
    limit: Option<u64>,
    max: usize,
    idle: Duration,
    /// The relay may take two pipes per connection (`fd_budget`).
    pipes: bool,
}

/// Why a target is refused (the verdict's `reason`, the `X-Husk-Denied`
/// header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denial {
    NotAllowed,
    PrivateAddress,
    SniMismatch,
    NotTls,
    HostMismatch,
    BadRequest,
    ConnectionLimit,
    EgressBytes,
    Unresolved,
    ConnectFailed,
}

impl Denial {
    pub fn reason(self) -> &'static str {
        match self {
            Denial::NotAllowed => "not_allowed",
            Denial::PrivateAddress => "private_address",
            Denial::SniMismatch => "sni_mismatch",
            Denial::NotTls => "not_tls",
            Denial::HostMismatch => "host_mismatch",
            Denial::BadRequest => "bad_request",
            Denial::ConnectionLimit => "connection_limit",
            Denial::EgressBytes => "egress_bytes_exceeded",
            Denial::Unresolved => "unresolved",
            Denial::ConnectFailed => "connect_failed",
        }
    }

    fn http_status(self) -> u16 {
        match self {
            Denial::BadRequest => 400,
            Denial::ConnectionLimit => 503,
            Denial::Unresolved | Denial::ConnectFailed => 502,
            _ => 403,
        }
    }

    fn socks_reply(self) -> u8 {
        match self {
            Denial::Unresolved => socks::REP_HOST_UNREACHABLE,
            Denial::ConnectFailed => socks::REP_REFUSED,
            Denial::BadRequest | Denial::ConnectionLimit => socks::REP_FAILURE,
            _ => socks::REP_NOT_ALLOWED,
        }
    }
}

impl Shared {
    fn deny(&self, t: &Authority, d: Denial) -> Denial {
        if let Ok(mut l) = self.ledger.lock() {
            l.denied(&t.host, t.port, d.reason());
        }
        d
    }

    /// The policy's answer for a target, and the addresses to connect to.
    fn decide(&self, t: &Authority) -> Result<Vec<SocketAddr>, Denial> {
        if self.limit.is_some_and(|l| self.bytes.load(Ordering::Relaxed) >= l) {
            return Err(self.deny(t, Denial::EgressBytes));
        }
        if let Ok(ip) = t.host.parse::<IpAddr>() {
            if !self.policy.allows_addr(ip, t.port) {
                return Err(self.deny(t, Denial::NotAllowed));
            }
            return Ok(vec![SocketAddr::new(ip, t.port)]);
        }
        if !self.policy.allows_name(&t.host, t.port) {
            return Err(self.deny(t, Denial::NotAllowed));
        }
        // `--add-host` pins are the user's own word for where a name goes.
        if let Some(ips) = self.pins.get(&t.host) {
            return Ok(ips.iter().map(|ip| SocketAddr::new(*ip, t.port)).collect());
        }
        let resolved: Vec<SocketAddr> = match (t.host.as_str(), t.port).to_socket_addrs() {
            Ok(a) => a.collect(),
            Err(_) => return Err(self.deny(t, Denial::Unresolved)),
        };
        if resolved.is_empty() {
            return Err(self.deny(t, Denial::Unresolved));
        }
        // DNS rebinding: an allowed name must not lead to the host or its
        // networks, unless a rule names that address itself.
        let ok: Vec<SocketAddr> = resolved
            .into_iter()
            .filter(|a| !is_internal(a.ip(), &self.own) || self.policy.allows_addr(a.ip(), t.port))
            .collect();
        if ok.is_empty() {
            return Err(self.deny(t, Denial::PrivateAddress));
        }
        Ok(ok)
    }

    fn connect(&self, t: &Authority, addrs: &[SocketAddr]) -> Result<TcpStream, Denial> {
        for a in addrs {
            if let Ok(s) = TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
                return Ok(s);
            }
        }
        Err(self.deny(t, Denial::ConnectFailed))
    }
}

/// Reads until `done` says the buffer holds a whole message (Some(len)),
/// or fails; bounded by `max` bytes.
fn read_until<T>(
    c: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
    mut done: impl FnMut(&[u8]) -> Option<T>,
) -> Option<T> {
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(v) = done(buf) {
            return Some(v);
        }
        if buf.len() >= max {
            return None;
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A tunnel refused after its `200` (or SOCKS success): the denial, and
/// what the client sent, to answer it in its own protocol.
type Refused = (Denial, Vec<u8>);

/// For a tunnel to port 443 (or any tunnel whose client speaks TLS): the
/// ClientHello must name the host the tunnel was allowed for. Returns the
/// bytes read, to be sent on.
fn check_hello(c: &mut TcpStream, t: &Authority) -> Result<Vec<u8>, Refused> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tls::sni(&buf) {
            Ok(Some(name)) if name == t.host => return Ok(buf),
            // An IP literal target: there is no name to compare.
            Ok(None) if t.host.parse::<IpAddr>().is_ok() => return Ok(buf),
            Ok(_) => return Err((Denial::SniMismatch, buf)),
            Err(tls::HelloError::NotTls) if t.port != 443 => return Ok(buf),
            Err(tls::HelloError::Incomplete) if buf.len() < tls::MAX_HELLO => {}
            Err(_) => return Err((Denial::NotTls, buf)),
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return Err((Denial::NotTls, buf)),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The last word to a client whose tunnel was refused after it was
/// granted: a TLS client gets a fatal alert (`unrecognized_name` for an
/// SNI that is not the allowed host, so the TLS library names the cause
/// instead of reporting a bare EOF), an HTTP request sent into a tunnel to
/// port 443 gets the proxy's 403; anything else only the close.
fn tunnel_refusal(d: Denial, first: &[u8]) -> Option<Vec<u8>> {
    match (d, first.first()) {
        (Denial::SniMismatch, _) => Some(tls::alert(tls::ALERT_UNRECOGNIZED_NAME).to_vec()),
        (_, Some(0x16)) => Some(tls::alert(tls::ALERT_DECODE_ERROR).to_vec()),
        (_, Some(b)) if b.is_ascii_uppercase() && http::head_end(first).is_some() => {
            Some(http::denied(d.http_status(), d.reason(), "this tunnel carries only TLS"))
        }
        _ => None,
    }
}

/// Accounts a tunnel refused after it was granted, answers and closes it.
fn refuse_tunnel(s: &Shared, c: &mut TcpStream, t: &Authority, (d, first): Refused) {
    s.deny(t, d);
    if let Some(answer) = tunnel_refusal(d, &first) {
        let _ = c.write_all(&answer);
        let _ = c.shutdown(std::net::Shutdown::Write);
    }
}

/// One granted connection's accounting, as the relay moves its bytes.
struct Flow<'a> {
    s: &'a Shared,
    t: &'a Authority,
}

impl relay::Meter for Flow<'_> {
    fn allowance(&self) -> Option<u64> {
        self.s.limit.map(|l| l.saturating_sub(self.s.bytes.load(Ordering::Relaxed)))
    }

    fn moved(&self, up: bool, n: u64) -> bool {
        let total = self.s.bytes.fetch_add(n, Ordering::Relaxed) + n;
        let over = self.s.limit.is_some_and(|lim| total > lim);
        if let Ok(mut l) = self.s.ledger.lock() {
            let (u, d) = if up { (n, 0) } else { (0, n) };
            l.bytes(&self.t.host, self.t.port, u, d);
            if over {
                l.exceeded = true;
            }
        }
        !over
    }
}

fn http_client(s: &Shared, mut c: TcpStream) {
    let mut buf = Vec::new();
    let Some(end) = read_until(&mut c, &mut buf, http::MAX_HEAD, http::head_end) else {
        if buf.len() >= http::MAX_HEAD {
            let _ = c.write_all(&http::denied(431, "bad_request", "request head too large"));
        }
        return;
    };
    let unknown = Authority { host: "-".into(), port: 0 };
    let req = match http::parse(&buf[..end]) {
        Ok(r) => r,
        Err(e) => {
            let d = match &e {
                http::HttpError::HostMismatch { target, .. } => {
                    let t = http::parse_authority(target, Some(80)).unwrap_or(unknown);
                    s.deny(&t, Denial::HostMismatch)
                }
                _ => s.deny(&unknown, Denial::BadRequest),
            };
            let _ = c.write_all(&http::denied(d.http_status(), d.reason(), &e.to_string()));
            return;
        }
    };
    let rest = buf[end..].to_vec();
    let refuse = |c: &mut TcpStream, t: &Authority, d: Denial| {
        let detail = format!("{}:{}", t.host, t.port);
        let _ = c.write_all(&http::denied(d.http_status(), d.reason(), &detail));
    };
    match req {
        Request::Connect { target } => {
            let up = match s.decide(&target).and_then(|a| s.connect(&target, &a)) {
                Ok(u) => u,
                Err(d) => return refuse(&mut c, &target, d),
            };
            if c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").is_err() {
                return;
            }
            // Whatever the client sent after the head is its first tunnel
            // bytes: read on from there for the ClientHello.
            let hello = match check_tunnel(&mut c, &target, rest) {
                Ok(h) => h,
                Err(r) => return refuse_tunnel(s, &mut c, &target, r),
            };
            start(s, &target, &c, &up, &hello);
        }
        Request::Forward { method, target, path, version, headers } => {
            let up = match s.decide(&target).and_then(|a| s.connect(&target, &a)) {
                Ok(u) => u,
                Err(d) => return refuse(&mut c, &target, d),
            };
            let mut first = http::upstream_head(&method, &path, &version, &headers);
            first.extend_from_slice(&rest);
            start(s, &target, &c, &up, &first);
        }
    }
}

fn check_tunnel(c: &mut TcpStream, t: &Authority, already: Vec<u8>) -> Result<Vec<u8>, Refused> {
    if already.is_empty() {
        return check_hello(c, t);
    }
    // Rare (a client pipelining its hello after CONNECT): judge what came.
    match tls::sni(&already) {
        Ok(Some(name)) if name == t.host => Ok(already),
        Err(tls::HelloError::NotTls) if t.port != 443 => Ok(already),
        Ok(None) if t.host.parse::<IpAddr>().is_ok() => Ok(already),
        Err(tls::HelloError::Incomplete) => Err((Denial::NotTls, already)),
        Ok(_) => Err((Denial::SniMismatch, already)),
        Err(_) => Err((Denial::NotTls, already)),
    }
}

/// Accounts the connection, sends what was read ahead, relays.
fn start(s: &Shared, t: &Authority, c: &TcpStream, up: &TcpStream, first: &[u8]) {
    if let Ok(mut l) = s.ledger.lock() {
        l.connected(&t.host, t.port);
        l.bytes(&t.host, t.port, first.len() as u64, 0);
    }
    s.bytes.fetch_add(first.len() as u64, Ordering::Relaxed);
    let mut u = up;
    if !first.is_empty() && u.write_all(first).is_err() {
        return;
    }
    let _ = c.set_read_timeout(None);
    relay::relay(c, up, s.idle, s.pipes, &Flow { s, t });
}

fn socks_client(s: &Shared, mut c: TcpStream) {
    let mut buf = Vec::new();
    let unknown = Authority { host: "-".into(), port: 0 };
    let greet = read_until(&mut c, &mut buf, 258, |b| match socks::greeting(b) {
        Err(socks::SocksError::Incomplete) => None,
        r => Some(r),
    });
    match greet {
        Some(Ok(n)) => {
            buf.drain(..n);
            if c.write_all(&[5, 0]).is_err() {
                return;
            }
        }
        Some(Err(socks::SocksError::NoMethod)) => {
            let _ = c.write_all(&[5, 0xff]);
            s.deny(&unknown, Denial::BadRequest);
            return;
        }
        _ => {
            s.deny(&unknown, Denial::BadRequest);
            return;
        }
    }
    let req = read_until(&mut c, &mut buf, 262, |b| match socks::request(b) {
        Err(socks::SocksError::Incomplete) => None,
        r => Some(r),
    });
    let (target, n) = match req {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            let _ = c.write_all(&socks::reply(e.reply()));
            s.deny(&unknown, Denial::BadRequest);
            return;
        }
        None => {
            s.deny(&unknown, Denial::BadRequest);
            return;
        }
    };
    let rest = buf[n..].to_vec();
    let up = match s.decide(&target).and_then(|a| s.connect(&target, &a)) {
        Ok(u) => u,
        Err(d) => {
            let _ = c.write_all(&socks::reply(d.socks_reply()));
            return;
        }
    };
    if c.write_all(&socks::reply(socks::REP_OK)).is_err() {
        return;
    }
    match check_tunnel(&mut c, &target, rest) {
        Ok(first) => start(s, &target, &c, &up, &first),
        Err(r) => refuse_tunnel(s, &mut c, &target, r),
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Http,
    Socks,
}

fn serve(s: Arc<Shared>, l: TcpListener, kind: Kind) {
    for c in l.incoming() {
        let Ok(mut c) = c else { continue };
        let _ = c.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
        let _ = c.set_write_timeout(Some(s.idle));
        if s.active.fetch_add(1, Ordering::SeqCst) >= s.max {
            s.active.fetch_sub(1, Ordering::SeqCst);
            let any = Authority { host: "*".into(), port: 0 };
            let d = s.deny(&any, Denial::ConnectionLimit);
            let answer = match kind {
                Kind::Http => http::denied(d.http_status(), d.reason(), "too many connections"),
                Kind::Socks => socks::refusal(d.socks_reply()).to_vec(),
            };
            refuse_at_once(&mut c, &answer);
            continue;
        }
        let s2 = s.clone();
        let spawned = std::thread::Builder::new().stack_size(128 * 1024).spawn(move || {
            match kind {
                Kind::Http => http_client(&s2, c),
                Kind::Socks => socks_client(&s2, c),
            }
            s2.active.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            s.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Answers a client over the connection cap on the accepting thread,
/// without waiting for it: whatever it sent already is read first (closing
/// a socket with unread bytes resets the connection, and the reset can
/// overtake the answer), then the answer, then the end of the stream.
fn refuse_at_once(c: &mut TcpStream, answer: &[u8]) {
    let mut sink = [0u8; 4096];
    if c.set_nonblocking(true).is_err() {
        return;
    }
    let _ = c.read(&mut sink);
    let _ = c.write_all(answer);
    let _ = c.shutdown(std::net::Shutdown::Write);
    let _ = c.read(&mut sink);
}

/// File descriptors a relayed connection holds: its two sockets and the
/// relay's two pipes.
const FDS_PER_CONNECTION: u64 = 6;

/// Raises the soft limit on open files to what `max` connections with
/// pipes need (the usual soft limit, 1024, is less than 256 x 6), within
/// the hard limit. Whether that was enough: if not, the relay copies
/// through a buffer (two fds per connection), so a full proxy still gets
/// the sockets it needs instead of failing connects with EMFILE.
fn fd_budget(max: usize) -> bool {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let need = max as u64 * FDS_PER_CONNECTION + 64;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return false };
    if soft >= need {
        return true;
    }
    let want = need.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, want, hard).is_ok() && want >= need
}

fn own_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else { return Vec::new() };
    addrs
        .filter_map(|a| a.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect()
}

/// `husk egress-proxy`: the config as JSON on stdin, the listeners at the
/// fds it names; the report on stdout at SIGTERM. Exit 125 on a bad start.
pub fn main() -> i32 {
    // The configuration is the first line; each byte after it asks for
    // the accounting so far (`EgressProxy::snapshot`).
    let mut text = String::new();
    let mut stdin = std::io::BufReader::new(std::io::stdin());
    if std::io::BufRead::read_line(&mut (&mut stdin).take(1 << 20), &mut text).is_err() {
        eprintln!("husk egress-proxy: cannot read the configuration on stdin");
        return 125;
    }
    let cfg: ProxyConfig = match serde_json::from_str(&text) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("husk egress-proxy: bad configuration: {e}");
            return 125;
        }
    };
    let policy = match Policy::parse(&cfg.rules) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("husk egress-proxy: {e}");
            return 125;
        }
    };
    let mut pins: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for (name, ip) in &cfg.add_hosts {
        pins.entry(name.clone()).or_default().push(*ip);
    }
    // The end comes as SIGTERM, waited for below: blocked before any thread
    // starts, so every thread inherits the block.
    let max = cfg.max_connections.max(1);
    let pipes = fd_budget(max);
    let mut term = nix::sys::signal::SigSet::empty();
    term.add(nix::sys::signal::Signal::SIGTERM);
    if crate::sys::signal::block(&term).is_err() {
        return 125;
    }
    let s = Arc::new(Shared {
        policy,
        pins,
        own: own_addresses(),
        ledger: Mutex::new(Ledger::default()),
        active: AtomicUsize::new(0),
        bytes: AtomicU64::new(0),
        limit: cfg.egress_bytes,
        max,
        idle: Duration::from_millis(cfg.idle_timeout_ms.max(1)),
        pipes,
    });
    for (fd, kind) in [(cfg.http_fd, Kind::Http), (cfg.socks_fd, Kind::Socks)] {
        let l = match crate::sys::net::inherited_listener(fd) {
            Ok(fd) => TcpListener::from(fd),
            Err(e) => {
                eprintln!("husk egress-proxy: fd {fd} is not a listening socket: {e}");
                return 125;
            }
        };
        let s = s.clone();
        if std::thread::Builder::new().stack_size(128 * 1024).spawn(move || serve(s, l, kind)).is_err() {
            return 125;
        }
    }
    let base = NetworkReport {
        mode: "allowlist".into(),
        rules: cfg.rules.clone(),
        http_proxy: format!("127.0.0.1:{}", super::HTTP_PORT),
        socks_proxy: format!("127.0.0.1:{}", super::SOCKS_PORT),
        egress_bytes_limit: cfg.egress_bytes,
        max_connections: cfg.max_connections as u64,
        ..Default::default()
    };
    let write_report = {
        let s = s.clone();
        move || {
            let report = match s.ledger.lock() {
                Ok(l) => l.report(base.clone()),
                Err(_) => NetworkReport { error: Some("the proxy's ledger was poisoned".into()), ..base.clone() },
            };
            let mut line = serde_json::to_vec(&report).unwrap_or_default();
            line.push(b'\n');
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&line);
            let _ = out.flush();
        }
    };
    let asked = write_report.clone();
    let answering = std::thread::Builder::new().stack_size(128 * 1024).spawn(move || {
        let mut byte = [0u8; 1];
        // EOF: whoever asked is gone; the end still comes as SIGTERM (or
        // PDEATHSIG).
        while matches!(stdin.read(&mut byte), Ok(1)) {
            asked();
        }
    });
    if answering.is_err() {
        return 125;
    }
    let _ = term.wait();
    write_report();
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tunnel_refused_after_its_200_is_answered_in_its_own_protocol() {
        let hello = [0x16, 3, 1, 0, 4, 1, 0, 0, 0];
        assert_eq!(tunnel_refusal(Denial::SniMismatch, &hello), Some(vec![0x15, 3, 3, 0, 2, 2, 112]));
        assert_eq!(tunnel_refusal(Denial::NotTls, &hello), Some(vec![0x15, 3, 3, 0, 2, 2, 50]));
        let http = tunnel_refusal(Denial::NotTls, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap();
        let text = String::from_utf8_lossy(&http);
        assert!(text.starts_with("HTTP/1.1 403") && text.contains("X-Husk-Denied: not_tls"), "{text}");
        assert_eq!(tunnel_refusal(Denial::NotTls, b"\x00garbage"), None);
        assert_eq!(tunnel_refusal(Denial::NotTls, b""), None);
    }

    #[test]
    fn socks_clients_over_the_cap_get_a_general_failure() {
        assert_eq!(Denial::ConnectionLimit.socks_reply(), socks::REP_FAILURE);
        assert_eq!(socks::refusal(socks::REP_FAILURE), [5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0]);
    }
}
