//! The proxy's HTTP/1.x request head parser: a CONNECT authority or an
//! absolute-form `http://` target, and the headers. Input is hostile
//! (anything in the sandbox can send it): bounded, no allocation beyond
//! the head itself, never a panic.

/// Longest request head the proxy reads before it answers 431.
pub const MAX_HEAD: usize = 16 * 1024;
/// Most header lines a head may have.
pub const MAX_HEADERS: usize = 100;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authority {
    /// A name (lower case, no trailing dot) or an IP literal (IPv6 without
    /// brackets).
    pub host: String,
    pub port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `CONNECT host:port HTTP/1.1`.
    Connect { target: Authority },
    /// `GET http://host[:port]/path HTTP/1.1`: forwarded, rewritten to
    /// origin form.
    Forward { method: String, target: Authority, path: String, version: String, headers: Vec<(String, String)> },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("request head incomplete")]
    Incomplete,
    #[error("request head over {MAX_HEAD} bytes")]
    TooLarge,
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("only http:// targets are forwarded (use CONNECT for https)")]
    Scheme,
    #[error("Host header {header:?} does not match the request target {target:?}")]
    HostMismatch { header: String, target: String },
}

/// Where the head ends (index after "\r\n\r\n"), if it is complete.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Parses `host[:port]` (`[v6]:port` for IPv6), with `default` when no
/// port is given.
pub fn parse_authority(s: &str, default: Option<u16>) -> Result<Authority, HttpError> {
    let bad = HttpError::Malformed("bad host:port");
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or(bad.clone())?;
        h.parse::<std::net::Ipv6Addr>().map_err(|_| bad.clone())?;
        match after {
            "" => (h.to_string(), None),
            p => (h.to_string(), Some(p.strip_prefix(':').ok_or(bad.clone())?)),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (s.to_string(), None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or(bad.clone())?,
        None => default.ok_or(bad.clone())?,
    };
    let host = crate::net::rules::normalize_name(&host);
    let ok = host.parse::<std::net::IpAddr>().is_ok() || crate::net::rules::valid_name(&host);
    if !ok {
        return Err(bad);
    }
    Ok(Authority { host, port })
}

fn token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Parses a complete head (through the blank line).
pub fn parse(head: &[u8]) -> Result<Request, HttpError> {
    if head.len() > MAX_HEAD {
        return Err(HttpError::TooLarge);
    }
    let text = std::str::from_utf8(head).map_err(|_| HttpError::Malformed("not UTF-8"))?;
    let text = text.strip_suffix("\r\n\r\n").ok_or(HttpError::Incomplete)?;
    let mut lines = text.split("\r\n");
    let line = lines.next().ok_or(HttpError::Malformed("no request line"))?;
    let mut parts = line.split(' ');
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) => (m, t, v),
        _ => return Err(HttpError::Malformed("request line is not METHOD TARGET VERSION")),
    };
    if !token(method) {
        return Err(HttpError::Malformed("bad method"));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HttpError::Malformed("not HTTP/1.0 or HTTP/1.1"));
    }
    let mut headers = Vec::new();
    for l in lines {
        if headers.len() >= MAX_HEADERS {
            return Err(HttpError::Malformed("too many headers"));
        }
        let (k, v) = l.split_once(':').ok_or(HttpError::Malformed("header without ':'"))?;
        if !token(k) {
            return Err(HttpError::Malformed("bad header name"));
        }
        if v.bytes().any(|b| b < 0x20 && b != b'\t') {
            return Err(HttpError::Malformed("control character in a header"));
        }
        headers.push((k.to_string(), v.trim().to_string()));
    }
    if method == "CONNECT" {
        return Ok(Request::Connect { target: parse_authority(target, None)? });
    }
    let rest = target.strip_prefix("http://").ok_or(if target.contains("://") {
        HttpError::Scheme
    } else {
        HttpError::Malformed("a proxy request needs an absolute http:// target")
    })?;
    let (auth, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if auth.contains('@') {
        return Err(HttpError::Malformed("user info in the target"));
    }
    let target_auth = parse_authority(auth, Some(80))?;
    let path = if path.starts_with('?') { format!("/{path}") } else { path.to_string() };
    // The Host header, when present (HTTP/1.1 requires it), must name the
    // same origin as the target: the server behind an allowed address
    // would otherwise serve another virtual host.
    let hosts: Vec<&(String, String)> = headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case("host")).collect();
    if hosts.len() > 1 {
        return Err(HttpError::Malformed("more than one Host header"));
    }
    if let Some((_, h)) = hosts.first() {
        let same = parse_authority(h, Some(80)).is_ok_and(|a| a == target_auth);
        if !same {
            return Err(HttpError::HostMismatch { header: h.clone(), target: auth.to_string() });
        }
    }
    Ok(Request::Forward {
        method: method.to_string(),
        target: target_auth,
        path,
        version: version.to_string(),
        headers,
    })
}

/// The head sent upstream for a forwarded request: origin-form target,
/// the proxy's own headers dropped, and `Connection: close`, so one
/// client connection carries one checked request.
pub fn upstream_head(method: &str, path: &str, version: &str, headers: &[(String, String)]) -> Vec<u8> {
    let mut out = format!("{method} {path} {version}\r\n");
    for (k, v) in headers {
        let k_l = k.to_ascii_lowercase();
        if k_l.starts_with("proxy-") || k_l == "connection" || k_l == "keep-alive" {
            continue;
        }
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

/// A denial: 403 with the reason in `X-Husk-Denied`, and the connection
/// closed.
pub fn denied(status: u16, reason: &str, detail: &str) -> Vec<u8> {
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let body = format!("husk egress proxy: {reason}: {detail}\n");
    format!(
        "HTTP/1.1 {status} {text}\r\nX-Husk-Denied: {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_and_absolute_form_parse() {
        let r = parse(b"CONNECT Example.COM:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n").unwrap();
        assert_eq!(r, Request::Connect { target: Authority { host: "example.com".into(), port: 443 } });
        let r = parse(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r, Request::Connect { target: Authority { host: "::1".into(), port: 8443 } });
        let r =
            parse(b"GET http://a.test/x?y HTTP/1.1\r\nHost: a.test\r\nProxy-Connection: keep-alive\r\n\r\n").unwrap();
        let Request::Forward { target, path, headers, .. } = r else { panic!() };
        assert_eq!((target.host.as_str(), target.port, path.as_str()), ("a.test", 80, "/x?y"));
        let up = String::from_utf8(upstream_head("GET", &path, "HTTP/1.1", &headers)).unwrap();
        assert_eq!(up, "GET /x?y HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
    }

    #[test]
    fn host_header_must_match_the_target() {
        let e = parse(b"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n").unwrap_err();
        assert!(matches!(e, HttpError::HostMismatch { .. }), "{e}");
        assert!(parse(b"GET http://a.test:80/ HTTP/1.1\r\nHost: A.test\r\n\r\n").is_ok());
        assert!(parse(b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nhost: a.test\r\n\r\n").is_err());
    }

    #[test]
    fn garbage_is_refused_not_panicked_on() {
        for bad in [
            &b"\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET https://a/ HTTP/1.1\r\n\r\n",
            b"CONNECT a HTTP/1.1\r\n\r\n",
            b"CONNECT a:0 HTTP/1.1\r\n\r\n",
            b"GET http://u@a/ HTTP/1.1\r\n\r\n",
            b"G\xffT http://a/ HTTP/1.1\r\n\r\n",
            b"GET http://a/ HTTP/2\r\n\r\n",
            b"GET http://a/ HTTP/1.1\r\nX\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
