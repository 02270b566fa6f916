//! The egress probes: sandboxes with an allowlist (`--network allow=`) try
//! to reach a marker server on the host by every way but the allowed one
//! (straight past the proxy to an address a rule names, UDP, DNS, the HTTP
//! proxy to a name no rule allows or to a name that resolves to loopback,
//! SOCKS5 to a name no rule allows). The marker answers any connection with
//! the run's secret token and counts connections and datagrams, so an
//! escape shows twice: on the host and in the probe's report.

use super::finding::{After, Context, Finding, SandboxKernel, contained, error, escaped, not_applicable};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// What an egress probe's attempt must come to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A direct TCP connect, past the proxy, to an address a rule allows:
    /// the sandbox's namespace has no route to it.
    NoRoute,
    /// A UDP datagram or DNS query to the host's marker: nothing arrives
    /// and nothing answers.
    NoDatagram,
    /// A request through the HTTP proxy, refused with this reason.
    ProxyDenied(&'static str),
    /// A SOCKS5 CONNECT refused as not allowed (reply 2).
    SocksDenied,
}

/// The host's marker server: a TCP listener that answers every connection
/// with an HTTP response carrying the token, and a UDP socket; both on
/// 127.0.0.1, both counted.
#[derive(Debug)]
pub struct Marker {
    tcp_port: u16,
    udp: UdpSocket,
    hits: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Marker {
    pub fn create(token: &str) -> std::io::Result<Marker> {
        let tcp = TcpListener::bind("127.0.0.1:0")?;
        let tcp_port = tcp.local_addr()?.port();
        let udp = UdpSocket::bind("127.0.0.1:0")?;
        udp.set_nonblocking(true)?;
        let hits = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{token}", token.len());
        let (h, s) = (hits.clone(), stop.clone());
        let thread =
            std::thread::Builder::new().name("selftest-marker".into()).spawn(move || serve(tcp, &answer, &h, &s))?;
        Ok(Marker { tcp_port, udp, hits, stop, thread: Some(thread) })
    }

    pub fn tcp_port(&self) -> u16 {
        self.tcp_port
    }

    pub fn udp_port(&self) -> Option<u16> {
        self.udp.local_addr().ok().map(|a| a.port())
    }

    /// Connections accepted and datagrams received since the last call.
    /// Loopback delivers a datagram before sendto returns, so after the
    /// probe's run everything it sent is already queued here.
    pub fn take_hits(&self) -> u64 {
        let mut n = self.hits.swap(0, Ordering::SeqCst);
        let mut buf = [0u8; 2048];
        while self.udp.recv_from(&mut buf).is_ok() {
            n += 1;
        }
        n
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts until `stop`, polling so the fixture can end it.
fn serve(l: TcpListener, answer: &str, hits: &AtomicU64, stop: &AtomicBool) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    while !stop.load(Ordering::SeqCst) {
        let mut fds = [PollFd::new(l.as_fd(), PollFlags::POLLIN)];
        if !matches!(poll(&mut fds, PollTimeout::from(100u16)), Ok(n) if n > 0) {
            continue;
        }
        if let Ok((c, _)) = l.accept() {
            hits.fetch_add(1, Ordering::SeqCst);
            answer_once(c, answer.as_bytes());
        }
    }
}

/// The token, then the end of the stream; what the client sent is read
/// before the close so the answer is not lost to a reset.
fn answer_once(mut c: TcpStream, answer: &[u8]) {
    let _ = c.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = c.write_all(answer);
    let _ = c.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 4096];
    while matches!(c.read(&mut sink), Ok(n) if n > 0) {}
}

/// Why the egress probes do not run under gVisor.
pub const GVISOR: &str = "--network allow= needs the native backend (husk refuses it under runsc, exit 125)";

pub fn judge(e: Expect, ctx: &Context, r: &Value, after: &After) -> Finding {
    if ctx.kernel == SandboxKernel::Gvisor {
        return not_applicable(GVISOR);
    }
    if let Some(n) = after.egress_hits.filter(|n| *n > 0) {
        return escaped(format!("the host's marker server got {n} connection(s) or datagram(s)"));
    }
    if r.to_string().contains(&ctx.marker_token) {
        return escaped("the marker server's secret came back to the sandbox");
    }
    let errno = r["errno"].as_str();
    match e {
        Expect::NoRoute => {
            let target = r["addr"].as_str().unwrap_or("?");
            match (r["ok"].as_bool(), errno) {
                (Some(true), _) => escaped(format!("connected to {target} past the proxy")),
                (_, Some(e @ ("ECONNREFUSED" | "ENETUNREACH" | "EHOSTUNREACH" | "ETIMEDOUT"))) => contained(format!(
                    "{target} (allowed by a rule): {e} without the proxy (the sandbox's namespace has only lo)"
                )),
                (_, Some(e)) => error(format!("{target}: {e}: no verdict")),
                _ => error("the report has neither ok nor errno"),
            }
        }
        Expect::NoDatagram => {
            let target = r["addr"].as_str().unwrap_or("?");
            if r["answered"] == true {
                return escaped(format!("{target} answered the query"));
            }
            let how = match errno {
                Some(e) => format!("sendto: {e}"),
                None => "sent on the sandbox's own lo".into(),
            };
            contained(format!("{target}: {how}; nothing reached the host's marker, nothing answered"))
        }
        Expect::ProxyDenied(reason) => {
            if r["ok"] != true {
                return error(format!("the proxy was not reachable ({}): no verdict", errno.unwrap_or("?")));
            }
            let status = r["status"].as_u64();
            match (status, r["denied"].as_str()) {
                (Some(s), Some(d)) if d == reason => {
                    contained(format!("the proxy refused it: {s}, X-Husk-Denied: {d}"))
                }
                (Some(s), Some(d)) => {
                    error(format!("the proxy refused it as {d} ({s}), not as {reason}: the probe missed its point"))
                }
                (Some(s @ 200..=399), None) => escaped(format!("the proxy let it through ({s})")),
                _ => error(format!("the proxy answered {status:?} without a reason: no verdict")),
            }
        }
        Expect::SocksDenied => {
            if r["ok"] != true {
                return error(format!("the SOCKS proxy was not reachable ({}): no verdict", errno.unwrap_or("?")));
            }
            match r["reply"].as_u64() {
                Some(2) => contained("the SOCKS proxy refused it: reply 2 (not allowed by ruleset)"),
                Some(0) => escaped("the SOCKS proxy connected it"),
                other => error(format!("SOCKS reply {other:?}: no verdict")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> Context {
        Context { marker_token: "s3cret".into(), ..Default::default() }
    }

    #[test]
    fn refusals_are_contained_and_anything_reaching_the_marker_escaped() {
        let none = After { egress_hits: Some(0), ..Default::default() };
        let j = |e, r: Value, a: &After| judge(e, &ctx(), &r, a).verdict;
        use super::super::finding::Verdict::*;
        let denied = json!({"ok": true, "status": 403, "denied": "not_allowed"});
        assert_eq!(j(Expect::ProxyDenied("not_allowed"), denied.clone(), &none), Contained);
        assert_eq!(j(Expect::ProxyDenied("private_address"), denied, &none), Error);
        let through = json!({"ok": true, "status": 200, "denied": null, "answer": "HTTP/1.1 200 OK\r\n\r\ns3cret"});
        assert_eq!(j(Expect::ProxyDenied("not_allowed"), through, &none), Escaped);
        assert_eq!(j(Expect::ProxyDenied("not_allowed"), json!({"ok": false, "errno": "ECONNREFUSED"}), &none), Error);
        assert_eq!(j(Expect::SocksDenied, json!({"ok": true, "reply": 2}), &none), Contained);
        assert_eq!(j(Expect::SocksDenied, json!({"ok": true, "reply": 0}), &none), Escaped);
        assert_eq!(j(Expect::NoRoute, json!({"ok": false, "errno": "ECONNREFUSED", "addr": "x"}), &none), Contained);
        assert_eq!(j(Expect::NoRoute, json!({"ok": true, "addr": "x"}), &none), Escaped);
        let sent = json!({"ok": true, "addr": "x", "answered": false});
        assert_eq!(j(Expect::NoDatagram, sent.clone(), &none), Contained);
        // What the host saw outweighs what the probe says.
        let hit = After { egress_hits: Some(1), ..Default::default() };
        assert_eq!(j(Expect::NoDatagram, sent.clone(), &hit), Escaped);
        let gvisor = Context { kernel: SandboxKernel::Gvisor, ..ctx() };
        assert_eq!(judge(Expect::NoDatagram, &gvisor, &sent, &none).verdict, NotApplicable);
    }

    #[test]
    fn the_marker_counts_connections_and_datagrams() {
        let m = Marker::create("tok").unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", m.tcp_port())).unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert!(got.ends_with("\r\n\r\ntok"), "{got}");
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        u.send_to(b"x", ("127.0.0.1", m.udp_port().unwrap())).unwrap();
        assert_eq!(m.take_hits(), 2);
        assert_eq!(m.take_hits(), 0);
    }
}
