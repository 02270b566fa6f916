//! SOCKS5 (RFC 1928), the parts the proxy speaks: the greeting (no
//! authentication only) and the CONNECT request. Pure parsers over bytes
//! already read, so they are fuzzed like the HTTP one.

use crate::net::http::Authority;

/// Reply codes (RFC 1928 section 6).
pub const REP_OK: u8 = 0x00;
pub const REP_FAILURE: u8 = 0x01;
pub const REP_NOT_ALLOWED: u8 = 0x02;
pub const REP_HOST_UNREACHABLE: u8 = 0x04;
pub const REP_REFUSED: u8 = 0x05;
pub const REP_CMD_UNSUPPORTED: u8 = 0x07;
pub const REP_ATYP_UNSUPPORTED: u8 = 0x08;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SocksError {
    #[error("incomplete")]
    Incomplete,
    #[error("not SOCKS version 5")]
    Version,
    #[error("the client offers no method without authentication")]
    NoMethod,
    #[error("only CONNECT is supported (command {0})")]
    Command(u8),
    #[error("unknown address type {0}")]
    AddressType(u8),
    #[error("malformed request: {0}")]
    Malformed(&'static str),
}

impl SocksError {
    /// The reply code a failed request gets.
    pub fn reply(&self) -> u8 {
        match self {
            SocksError::Command(_) => REP_CMD_UNSUPPORTED,
            SocksError::AddressType(_) => REP_ATYP_UNSUPPORTED,
            _ => REP_FAILURE,
        }
    }
}

/// The greeting `05 N methods...`: its length, when "no authentication"
/// (0) is offered.
pub fn greeting(buf: &[u8]) -> Result<usize, SocksError> {
    let (&ver, rest) = buf.split_first().ok_or(SocksError::Incomplete)?;
    if ver != 5 {
        return Err(SocksError::Version);
    }
    let (&n, rest) = rest.split_first().ok_or(SocksError::Incomplete)?;
    let methods = rest.get(..usize::from(n)).ok_or(SocksError::Incomplete)?;
    if !methods.contains(&0) {
        return Err(SocksError::NoMethod);
    }
    Ok(2 + usize::from(n))
}

/// The request `05 CMD 00 ATYP ADDR PORT`: the target and the length.
pub fn request(buf: &[u8]) -> Result<(Authority, usize), SocksError> {
    let head = buf.get(..4).ok_or(SocksError::Incomplete)?;
    if head[0] != 5 {
        return Err(SocksError::Version);
    }
    let (host, at) = match head[3] {
        1 => {
            let a: [u8; 4] =
                buf.get(4..8).ok_or(SocksError::Incomplete)?.try_into().map_err(|_| SocksError::Incomplete)?;
            (std::net::Ipv4Addr::from(a).to_string(), 8)
        }
        4 => {
            let a: [u8; 16] =
                buf.get(4..20).ok_or(SocksError::Incomplete)?.try_into().map_err(|_| SocksError::Incomplete)?;
            (std::net::Ipv6Addr::from(a).to_string(), 20)
        }
        3 => {
            let n = usize::from(*buf.get(4).ok_or(SocksError::Incomplete)?);
            let name = buf.get(5..5 + n).ok_or(SocksError::Incomplete)?;
            let name = std::str::from_utf8(name).map_err(|_| SocksError::Malformed("name is not UTF-8"))?;
            let name = crate::net::rules::normalize_name(name);
            if !crate::net::rules::valid_name(&name) && name.parse::<std::net::IpAddr>().is_err() {
                return Err(SocksError::Malformed("not a host name"));
            }
            (name, 5 + n)
        }
        t => return Err(SocksError::AddressType(t)),
    };
    let p = buf.get(at..at + 2).ok_or(SocksError::Incomplete)?;
    let port = u16::from_be_bytes([p[0], p[1]]);
    if head[1] != 1 {
        return Err(SocksError::Command(head[1]));
    }
    if head[2] != 0 {
        return Err(SocksError::Malformed("reserved byte is not 0"));
    }
    if port == 0 {
        return Err(SocksError::Malformed("port 0"));
    }
    Ok((Authority { host, port }, at + 2))
}

/// A reply with an all-zero IPv4 bound address.
pub fn reply(code: u8) -> [u8; 10] {
    [5, code, 0, 1, 0, 0, 0, 0, 0, 0]
}

/// A whole refusal sent before the client's greeting was read (the
/// connection cap: the proxy cannot wait for it): the method choice "no
/// authentication", then the failure reply to whatever request follows. A
/// client reads the first as the answer to its greeting and the second as
/// the answer to its CONNECT, so it fails at once instead of hanging.
pub fn refusal(code: u8) -> [u8; 12] {
    let mut r = [0u8; 12];
    r[..2].copy_from_slice(&[5, 0]);
    r[2..].copy_from_slice(&reply(code));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_and_requests_parse() {
        assert_eq!(greeting(&[5, 2, 2, 0]), Ok(4));
        assert_eq!(greeting(&[5, 1, 2]), Err(SocksError::NoMethod));
        assert_eq!(greeting(&[4, 1, 0]), Err(SocksError::Version));
        assert_eq!(greeting(&[5, 3, 0]), Err(SocksError::Incomplete));
        let (a, n) = request(&[5, 1, 0, 3, 6, b'A', b'.', b't', b'e', b's', b't', 0x01, 0xbb]).unwrap();
        assert_eq!((a.host.as_str(), a.port, n), ("a.test", 443, 13));
        let (a, _) = request(&[5, 1, 0, 1, 127, 0, 0, 1, 0, 80]).unwrap();
        assert_eq!(a.host, "127.0.0.1");
        assert_eq!(request(&[5, 3, 0, 1, 1, 2, 3, 4, 0, 80]), Err(SocksError::Command(3)));
        assert_eq!(request(&[5, 1, 0, 9]), Err(SocksError::AddressType(9)));
        assert_eq!(request(&[5, 1, 0, 3, 200, b'a']), Err(SocksError::Incomplete));
    }
}
