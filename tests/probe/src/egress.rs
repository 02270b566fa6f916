//! Ways out of a sandbox under `--network allow=`: a UDP datagram, a DNS
//! query, a request through the HTTP proxy and a CONNECT through the SOCKS5
//! proxy. Each reports what came back (the proxy's refusal, or the bytes of
//! whatever answered), so the judge can tell a refusal from an escape.
//! Numeric addresses only (no NSS in a static probe).

use crate::util::{Report, Usage, io_outcome, usage};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(3);
/// Most bytes of an answer kept in the report.
const KEEP: usize = 512;

fn addr(s: &str) -> Result<SocketAddr, Usage> {
    s.parse().map_err(|_| usage(format!("not IP:PORT: {s:?}")))
}

/// Reads what the peer sends until it closes, `WAIT` passes or `KEEP`
/// bytes came.
fn read_answer(s: &mut TcpStream) -> Vec<u8> {
    let _ = s.set_read_timeout(Some(WAIT));
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while got.len() < KEEP {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got.truncate(KEEP);
    got
}

/// `udp-send IP:PORT TEXT`: one datagram. ok = sendto succeeded (on the
/// sandbox's own `lo` it may: the judge asks the host whether it arrived).
pub fn udp_send(args: &[String]) -> Result<Report, Usage> {
    let [target, text] = args else { return Err(usage("udp-send IP:PORT TEXT")) };
    let to = addr(target)?;
    let r = UdpSocket::bind("0.0.0.0:0").and_then(|s| s.send_to(text.as_bytes(), to));
    let mut v = io_outcome(&r);
    v["addr"] = json!(target);
    Ok(Report::new(r.is_ok(), v))
}

/// A DNS query (RFC 1035) for `name`, type A, recursion desired.
fn dns_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x4b, 0x1d, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.trim_end_matches('.').split('.') {
        let l = &label.as_bytes()[..label.len().min(63)];
        q.push(l.len() as u8);
        q.extend_from_slice(l);
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// `dns-query IP:PORT NAME`: a DNS query to a resolver at IP:PORT, and up
/// to 3 s for an answer. ok = sent; `answered` = a reply came back.
pub fn dns(args: &[String]) -> Result<Report, Usage> {
    let [target, name] = args else { return Err(usage("dns-query IP:PORT NAME")) };
    let to = addr(target)?;
    let sock = match UdpSocket::bind("0.0.0.0:0") {
        Ok(s) => s,
        Err(e) => return Ok(Report::new(false, io_outcome::<()>(&Err(e)))),
    };
    let sent = sock.send_to(&dns_query(name), to);
    let mut v = io_outcome(&sent);
    v["addr"] = json!(target);
    v["name"] = json!(name);
    if sent.is_ok() {
        let _ = sock.set_read_timeout(Some(WAIT));
        let mut buf = [0u8; 512];
        let answer = sock.recv(&mut buf);
        v["answered"] = json!(answer.is_ok());
        if let Ok(n) = answer {
            v["answer"] = json!(String::from_utf8_lossy(&buf[..n]));
        } else if let Err(e) = answer {
            v["answer_error"] = json!(crate::util::errno_name(e.raw_os_error().unwrap_or(0)));
        }
    }
    Ok(Report::new(sent.is_ok(), v))
}

/// `proxy-get PROXY_IP:PORT URL`: `GET URL` through an HTTP proxy. ok =
/// the proxy was reached; `status`, the `X-Husk-Denied` reason and the
/// start of the answer are reported.
pub fn proxy_get(args: &[String]) -> Result<Report, Usage> {
    let [proxy, url] = args else { return Err(usage("proxy-get PROXY_IP:PORT URL")) };
    let host = url
        .strip_prefix("http://")
        .and_then(|r| r.split('/').next())
        .ok_or_else(|| usage("URL is http://HOST[:PORT]/..."))?;
    let r = TcpStream::connect_timeout(&addr(proxy)?, WAIT);
    let mut v = io_outcome(&r);
    v["proxy"] = json!(proxy);
    v["url"] = json!(url);
    let Ok(mut s) = r else { return Ok(Report::new(false, v)) };
    let req = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if let Err(e) = s.write_all(req.as_bytes()) {
        v["write_error"] = json!(e.to_string());
    }
    let answer = String::from_utf8_lossy(&read_answer(&mut s)).into_owned();
    let status = answer.split(' ').nth(1).and_then(|c| c.parse::<u16>().ok());
    let denied = answer.lines().find_map(|l| l.strip_prefix("X-Husk-Denied:").map(|r| r.trim().to_string()));
    v["status"] = json!(status);
    v["denied"] = json!(denied);
    v["answer"] = json!(answer);
    Ok(Report::new(true, v))
}

/// `socks-connect PROXY_IP:PORT HOST PORT`: a SOCKS5 CONNECT (no
/// authentication, the host sent as a name). ok = the proxy was reached;
/// `reply` is its reply code (0 = connected), and after a 0 the start of
/// whatever the target sent.
pub fn socks_connect(args: &[String]) -> Result<Report, Usage> {
    let [proxy, host, port] = args else { return Err(usage("socks-connect PROXY_IP:PORT HOST PORT")) };
    let port: u16 = port.parse().map_err(|_| usage(format!("not a port: {port:?}")))?;
    if host.len() > 255 {
        return Err(usage("host name longer than 255 bytes"));
    }
    let r = TcpStream::connect_timeout(&addr(proxy)?, WAIT);
    let mut v = io_outcome(&r);
    v["proxy"] = json!(proxy);
    v["target"] = json!(format!("{host}:{port}"));
    let Ok(mut s) = r else { return Ok(Report::new(false, v)) };
    let mut req = vec![5, 1, 0, 5, 1, 0, 3, host.len() as u8];
    req.extend_from_slice(host.as_bytes());
    req.extend_from_slice(&port.to_be_bytes());
    let _ = s.write_all(&req);
    let _ = s.set_read_timeout(Some(WAIT));
    // The method choice (2 bytes), then the reply (10 for an IPv4 bound
    // address, which is what husk's proxy sends).
    let mut head = [0u8; 12];
    let mut got = 0;
    while got < head.len() {
        match s.read(&mut head[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    v["reply"] = json!(if got >= 4 { Some(head[3]) } else { None });
    if got == head.len() && head[3] == 0 {
        let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
        v["answer"] = json!(String::from_utf8_lossy(&read_answer(&mut s)));
    }
    Ok(Report::new(true, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_query_encodes_labels() {
        let q = dns_query("a.bc.");
        assert_eq!(&q[12..], &[1, b'a', 2, b'b', b'c', 0, 0, 1, 0, 1]);
        assert_eq!(&q[4..6], &[0, 1]);
    }
}
