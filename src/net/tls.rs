//! The server name (SNI) of a TLS ClientHello, read from the bytes a
//! client sends first through a CONNECT tunnel, so the proxy can refuse a
//! tunnel whose TLS names another host than the one allowed (domain
//! fronting). Only parsed, never terminated: the TLS session stays the
//! client's and the server's (no interception); a refused hello gets a
//! fatal alert, the one thing the proxy ever says in TLS.

/// Most bytes the proxy buffers waiting for a whole ClientHello.
pub const MAX_HELLO: usize = 16 * 1024 + 5;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    #[error("incomplete ClientHello")]
    Incomplete,
    #[error("not a TLS handshake")]
    NotTls,
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
}

/// Alert descriptions (RFC 8446 section 6) the proxy sends when it
/// refuses a tunnel after reading its ClientHello.
pub const ALERT_DECODE_ERROR: u8 = 50;
pub const ALERT_UNRECOGNIZED_NAME: u8 = 112;

/// A fatal alert record, as a server would send it in place of its
/// ServerHello (record version 3.3, which TLS 1.3 keeps for compatibility).
pub fn alert(description: u8) -> [u8; 7] {
    [0x15, 3, 3, 0, 2, 2, description]
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HelloError> {
        let end = self.at.checked_add(n).ok_or(HelloError::Malformed("length overflow"))?;
        let s = self.b.get(self.at..end).ok_or(HelloError::Malformed("truncated"))?;
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<usize, HelloError> {
        Ok(usize::from(self.take(1)?[0]))
    }
    fn u16(&mut self) -> Result<usize, HelloError> {
        let s = self.take(2)?;
        Ok(usize::from(u16::from_be_bytes([s[0], s[1]])))
    }
    fn u24(&mut self) -> Result<usize, HelloError> {
        let s = self.take(3)?;
        Ok((usize::from(s[0]) << 16) | (usize::from(s[1]) << 8) | usize::from(s[2]))
    }
}

/// The SNI host name of the ClientHello at the start of `buf` (`None`: the
/// hello has no server_name). `Incomplete` asks for more bytes. The hello
/// may span several records; their fragments are joined.
pub fn sni(buf: &[u8]) -> Result<Option<String>, HelloError> {
    if buf.first().is_some_and(|b| *b != 0x16) {
        return Err(HelloError::NotTls);
    }
    // Join the handshake fragments of consecutive records.
    let mut hs = Vec::new();
    let mut at = 0;
    loop {
        let Some(h) = buf.get(at..at + 5) else { return Err(HelloError::Incomplete) };
        if h[0] != 0x16 || h[1] != 3 {
            return Err(HelloError::NotTls);
        }
        let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
        if len == 0 || len > 16384 {
            return Err(HelloError::Malformed("record length"));
        }
        let Some(frag) = buf.get(at + 5..at + 5 + len) else { return Err(HelloError::Incomplete) };
        hs.extend_from_slice(frag);
        at += 5 + len;
        if hs.len() >= 4 {
            let need = 4 + ((usize::from(hs[1]) << 16) | (usize::from(hs[2]) << 8) | usize::from(hs[3]));
            if hs.len() >= need {
                break;
            }
        }
        if at >= MAX_HELLO {
            return Err(HelloError::Malformed("ClientHello too large"));
        }
    }
    let mut c = Cursor { b: &hs, at: 0 };
    if c.u8()? != 1 {
        return Err(HelloError::Malformed("first handshake message is not a ClientHello"));
    }
    let len = c.u24()?;
    let body = c.take(len)?;
    let mut c = Cursor { b: body, at: 0 };
    c.take(2)?; // legacy_version
    c.take(32)?; // random
    let n = c.u8()?;
    c.take(n)?; // session id
    let n = c.u16()?;
    c.take(n)?; // cipher suites
    let n = c.u8()?;
    c.take(n)?; // compression methods
    if c.at == body.len() {
        return Ok(None); // no extensions
    }
    let n = c.u16()?;
    let exts = c.take(n)?;
    let mut c = Cursor { b: exts, at: 0 };
    let mut found = None;
    while c.at < exts.len() {
        let kind = c.u16()?;
        let n = c.u16()?;
        let data = c.take(n)?;
        if kind != 0 {
            continue;
        }
        if found.is_some() {
            return Err(HelloError::Malformed("two server_name extensions"));
        }
        let mut d = Cursor { b: data, at: 0 };
        let n = d.u16()?;
        let list = d.take(n)?;
        let mut l = Cursor { b: list, at: 0 };
        while l.at < list.len() {
            let name_type = l.u8()?;
            let n = l.u16()?;
            let name = l.take(n)?;
            if name_type == 0 {
                if found.is_some() {
                    return Err(HelloError::Malformed("two host names"));
                }
                let s = std::str::from_utf8(name).map_err(|_| HelloError::Malformed("host name is not UTF-8"))?;
                found = Some(crate::net::rules::normalize_name(s));
            }
        }
    }
    Ok(found)
}

/// A minimal ClientHello naming `host` (tests, the fuzz corpus, and the
/// selftest's probe build the same shape).
pub fn client_hello(host: &str) -> Vec<u8> {
    let name = host.as_bytes();
    let mut sni = Vec::new();
    sni.extend_from_slice(&((name.len() + 3) as u16).to_be_bytes());
    sni.push(0);
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name);
    let mut exts = vec![0, 0];
    exts.extend_from_slice(&(sni.len() as u16).to_be_bytes());
    exts.extend_from_slice(&sni);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![1];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_is_read_from_a_hello_even_when_split_across_records() {
        let h = client_hello("Example.com");
        assert_eq!(sni(&h), Ok(Some("example.com".into())));
        for cut in 0..h.len() {
            assert_eq!(sni(&h[..cut]), Err(HelloError::Incomplete), "cut {cut}");
        }
        // The same handshake in two records.
        let hs = &h[5..];
        let (a, b) = hs.split_at(20);
        let mut two = vec![0x16, 3, 1, 0, a.len() as u8];
        two.extend_from_slice(a);
        two.extend_from_slice(&[0x16, 3, 1]);
        two.extend_from_slice(&(b.len() as u16).to_be_bytes());
        two.extend_from_slice(b);
        assert_eq!(sni(&two), Ok(Some("example.com".into())));
    }

    #[test]
    fn not_tls_is_told_apart() {
        assert_eq!(sni(b"GET / HTTP/1.1\r\n"), Err(HelloError::NotTls));
        assert!(sni(&[0x16, 3, 1, 0, 4, 2, 0, 0, 0]).is_err());
    }
}
