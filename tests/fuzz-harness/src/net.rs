//! The egress proxy's parsers of what a sandbox sends (HTTP request head,
//! SOCKS5 greeting and request, TLS ClientHello) and the allowlist rule
//! grammar: never panic, and hold their promises on what they accept.

use husk::net::{http, rules, socks, tls};

/// An accepted request names a valid target, and a forwarded one's Host
/// header (if any) names the same origin; what goes upstream is one head.
pub fn http_head(data: &[u8]) {
    let Some(end) = http::head_end(data) else {
        assert!(http::parse(data).is_err());
        return;
    };
    match http::parse(&data[..end]) {
        Ok(http::Request::Connect { target }) => assert!(target.port > 0 && !target.host.is_empty()),
        Ok(http::Request::Forward { method, target, path, version, headers }) => {
            assert!(target.port > 0 && path.starts_with('/'));
            for (k, v) in headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case("host")) {
                assert_eq!(http::parse_authority(v, Some(80)).as_ref(), Ok(&target), "{k}: {v}");
            }
            let up = http::upstream_head(&method, &path, &version, &headers);
            assert_eq!(http::head_end(&up), Some(up.len()), "one head, ending the bytes");
        }
        Err(_) => {}
    }
}

/// A parsed SOCKS5 request consumed no more than it was given.
pub fn socks5(data: &[u8]) {
    if let Ok(n) = socks::greeting(data) {
        assert!(n <= data.len());
        if let Ok((t, m)) = socks::request(&data[n..]) {
            assert!(m <= data.len() - n && t.port > 0);
        }
    }
    let _ = socks::request(data);
}

/// The SNI of a hello husk builds reads back; arbitrary bytes never panic.
pub fn client_hello(data: &[u8]) {
    let _ = tls::sni(data);
    if let Ok(name) = std::str::from_utf8(data)
        && rules::valid_name(name)
    {
        let hello = tls::client_hello(name);
        assert_eq!(tls::sni(&hello), Ok(Some(rules::normalize_name(name))));
    }
}

/// A rule that parses allows something coherent: a name rule never
/// matches an address and an address rule never matches a name.
pub fn rule(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(r) = rules::Rule::parse(text) {
        match &r.target {
            rules::Target::Net { addr, .. } => assert!(!r.allows_name(&addr.to_string(), 443)),
            rules::Target::Name(n) => {
                assert!(n.parse::<std::net::IpAddr>().is_err() || !r.allows_addr(n.parse().unwrap(), 443))
            }
            rules::Target::Suffix(_) => {}
        }
    }
}
