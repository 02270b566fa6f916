//! HTTP/1.1 requests and responses for `husk serve`.
//!
//! The request head (request line and header fields) is parsed by httparse,
//! the zero-copy parser hyper uses: fuzzed upstream, no allocation, no
//! threads, and already in husk's binary through the registry client. What
//! is husk's own is the framing around it, the part request smuggling and
//! memory exhaustion live in: the head is bounded (`Limits::max_head`,
//! `max_headers`), a body has exactly one length (Content-Length, or
//! `Transfer-Encoding: chunked`, never both, never two different lengths),
//! and no body is read past `Limits::max_body`. Fuzzed by
//! tests/fuzz-harness/src/http.rs (`fuzz/corpus/http_request`).
//!
//! One request per connection: every response says `Connection: close`, so
//! no state (a half-read body, a pipelined request) carries over.

use std::io::{Read, Write};
use std::time::Instant;

/// Bounds on what a client may send.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Request line and header fields together.
    pub max_head: usize,
    pub max_headers: usize,
    pub max_body: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_head: 16 * 1024, max_headers: 64, max_body: 64 << 20 }
    }
}

/// A parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    /// The path without its query, percent-decoded.
    pub path: String,
    /// Query pairs, percent-decoded, in order.
    pub query: Vec<(String, String)>,
    /// Header fields with lower-cased names, in order.
    pub headers: Vec<(String, String)>,
    pub framing: Framing,
}

/// How the body's end is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn query_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.query.iter().filter(move |(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// `Expect: 100-continue`: the client (curl for bodies over 1 KiB)
    /// waits for a go-ahead before it sends the body.
    pub fn expects_continue(&self) -> bool {
        self.header("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    }
}

/// A whole request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub head: Head,
    pub body: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("the request head is larger than {0} bytes")]
    HeadTooLarge(usize),
    #[error("the request has more than {0} header fields")]
    TooManyHeaders(usize),
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("the request body is larger than {0} bytes (husk serve --max-body)")]
    BodyTooLarge(u64),
    #[error("Transfer-Encoding {0:?} is not supported; send Content-Length or chunked")]
    Unsupported(String),
    #[error("the connection closed before the request was complete")]
    Incomplete,
    #[error("the request did not arrive in time")]
    TimedOut,
    #[error("reading the request: {0}")]
    Io(std::io::Error),
}

impl HttpError {
    /// The status to answer with; `None` when nobody is left to answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            HttpError::HeadTooLarge(_) | HttpError::TooManyHeaders(_) => Some(431),
            HttpError::Malformed(_) => Some(400),
            HttpError::BodyTooLarge(_) => Some(413),
            HttpError::Unsupported(_) => Some(501),
            HttpError::TimedOut => Some(408),
            HttpError::Incomplete | HttpError::Io(_) => None,
        }
    }
}

fn io_error(e: std::io::Error) -> HttpError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => HttpError::TimedOut,
        std::io::ErrorKind::UnexpectedEof => HttpError::Incomplete,
        _ => HttpError::Io(e),
    }
}

/// Reads more bytes into `buf`, failing past `deadline` (the socket's read
/// timeout bounds one read; this bounds them all, against a client that
/// sends one byte at a time).
fn fill(r: &mut impl Read, buf: &mut Vec<u8>, want: usize, deadline: Option<Instant>) -> Result<usize, HttpError> {
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(HttpError::TimedOut);
    }
    let start = buf.len();
    buf.resize(start + want.max(1), 0);
    let n = loop {
        match r.read(&mut buf[start..]) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                buf.truncate(start);
                return Err(io_error(e));
            }
        }
    };
    buf.truncate(start + n);
    Ok(n)
}

/// Reads and parses the head. Returns it with the bytes read past it (the
/// body's start).
pub fn read_head(r: &mut impl Read, limits: &Limits, deadline: Option<Instant>) -> Result<(Head, Vec<u8>), HttpError> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let searched_from = buf.len().saturating_sub(3);
        let room = limits.max_head + 4 - buf.len().min(limits.max_head + 4);
        if room == 0 {
            return Err(HttpError::HeadTooLarge(limits.max_head));
        }
        let n = fill(r, &mut buf, room.min(8192), deadline)?;
        if n == 0 {
            return Err(HttpError::Incomplete);
        }
        if let Some(end) = find_head_end(&buf[searched_from..]).map(|e| e + searched_from) {
            if end > limits.max_head {
                return Err(HttpError::HeadTooLarge(limits.max_head));
            }
            let head = parse_head(&buf[..end], limits)?;
            return Ok((head, buf[end..].to_vec()));
        }
    }
}

/// The index just past the first CRLF CRLF.
fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Parses a complete head (ending in CRLF CRLF).
pub fn parse_head(bytes: &[u8], limits: &Limits) -> Result<Head, HttpError> {
    let mut fields = vec![httparse::EMPTY_HEADER; limits.max_headers];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(HttpError::Malformed("incomplete head".into())),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::TooManyHeaders(limits.max_headers)),
        Err(e) => return Err(HttpError::Malformed(e.to_string())),
    }
    let method = req.method.unwrap_or_default().to_string();
    if req.version != Some(1) && req.version != Some(0) {
        return Err(HttpError::Malformed("only HTTP/1.x is spoken here".into()));
    }
    let target = req.path.unwrap_or_default();
    if !target.starts_with('/') {
        return Err(HttpError::Malformed(format!("request target {target:?} is not an absolute path")));
    }
    let (raw_path, raw_query) = target.split_once('?').unwrap_or((target, ""));
    let path =
        percent_decode(raw_path).ok_or_else(|| HttpError::Malformed("bad percent-encoding in the path".into()))?;
    let mut query = Vec::new();
    for pair in raw_query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let dec = |s: &str| {
            percent_decode(&s.replace('+', " "))
                .ok_or_else(|| HttpError::Malformed("bad percent-encoding in the query".into()))
        };
        query.push((dec(k)?, dec(v)?));
    }
    let mut headers = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| HttpError::Malformed(format!("header {} is not UTF-8", h.name)))?;
        headers.push((h.name.to_ascii_lowercase(), value.trim().to_string()));
    }
    let framing = framing_of(&headers)?;
    Ok(Head { method, path, query, headers, framing })
}

/// One body length, or none: a request with both Content-Length and
/// Transfer-Encoding, or two different lengths, is refused (the shapes a
/// proxy and a server could read differently, RFC 9112 section 6.3).
fn framing_of(headers: &[(String, String)]) -> Result<Framing, HttpError> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for (name, value) in headers {
        match name.as_str() {
            "content-length" => {
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) || value.len() > 19 {
                    return Err(HttpError::Malformed(format!("Content-Length {value:?} is not a number")));
                }
                let n: u64 = value.parse().map_err(|_| HttpError::Malformed("Content-Length out of range".into()))?;
                if length.is_some_and(|l| l != n) {
                    return Err(HttpError::Malformed("two different Content-Length fields".into()));
                }
                length = Some(n);
            }
            "transfer-encoding" => {
                if !value.eq_ignore_ascii_case("chunked") || chunked {
                    return Err(HttpError::Unsupported(value.clone()));
                }
                chunked = true;
            }
            _ => {}
        }
    }
    match (length, chunked) {
        (Some(_), true) => Err(HttpError::Malformed("both Content-Length and Transfer-Encoding".into())),
        (Some(n), false) => Ok(Framing::Length(n)),
        (None, true) => Ok(Framing::Chunked),
        (None, false) => Ok(Framing::None),
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Reads the body `head` announces, `start` being what came with the head.
pub fn read_body(
    r: &mut impl Read,
    head: &Head,
    mut start: Vec<u8>,
    limits: &Limits,
    deadline: Option<Instant>,
) -> Result<Vec<u8>, HttpError> {
    match head.framing {
        Framing::None => Ok(Vec::new()),
        Framing::Length(n) => {
            if n > limits.max_body {
                return Err(HttpError::BodyTooLarge(limits.max_body));
            }
            let n = n as usize;
            if start.len() > n {
                // Bytes past the body: a pipelined request, which this
                // one-request-per-connection server never reads.
                start.truncate(n);
            }
            start.reserve_exact(n - start.len());
            while start.len() < n {
                let want = (n - start.len()).min(1 << 20);
                if fill(r, &mut start, want, deadline)? == 0 {
                    return Err(HttpError::Incomplete);
                }
            }
            Ok(start)
        }
        Framing::Chunked => read_chunked(r, start, limits, deadline),
    }
}

/// `Transfer-Encoding: chunked` (what `curl -T -` sends): hex size lines
/// (extensions after `;` ignored), data, CRLF; a zero size, then trailer
/// fields (read and dropped) up to an empty line.
fn read_chunked(
    r: &mut impl Read,
    mut buf: Vec<u8>,
    limits: &Limits,
    deadline: Option<Instant>,
) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    let mut pos = 0;
    // A line (size line or trailer field) is bounded like the head.
    let line = |buf: &mut Vec<u8>, pos: &mut usize, r: &mut dyn Read| -> Result<String, HttpError> {
        loop {
            if let Some(i) = buf[*pos..].windows(2).position(|w| w == b"\r\n") {
                let l = String::from_utf8_lossy(&buf[*pos..*pos + i]).into_owned();
                *pos += i + 2;
                return Ok(l);
            }
            if buf.len() - *pos > limits.max_head {
                return Err(HttpError::Malformed("a chunk line is too long".into()));
            }
            if fill(&mut ReadRef(r), buf, 4096, deadline)? == 0 {
                return Err(HttpError::Incomplete);
            }
        }
    };
    loop {
        let size_line = line(&mut buf, &mut pos, r)?;
        let hex = size_line.split(';').next().unwrap_or("").trim();
        if hex.is_empty() || hex.len() > 15 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(HttpError::Malformed(format!("chunk size {hex:?} is not hexadecimal")));
        }
        let size = u64::from_str_radix(hex, 16).map_err(|_| HttpError::Malformed("chunk size".into()))?;
        if size == 0 {
            while !line(&mut buf, &mut pos, r)?.is_empty() {}
            return Ok(body);
        }
        if body.len() as u64 + size > limits.max_body {
            return Err(HttpError::BodyTooLarge(limits.max_body));
        }
        let size = size as usize;
        while buf.len() - pos < size + 2 {
            let want = (size + 2 - (buf.len() - pos)).min(1 << 20);
            if fill(r, &mut buf, want, deadline)? == 0 {
                return Err(HttpError::Incomplete);
            }
        }
        body.extend_from_slice(&buf[pos..pos + size]);
        if &buf[pos + size..pos + size + 2] != b"\r\n" {
            return Err(HttpError::Malformed("a chunk does not end in CRLF".into()));
        }
        pos += size + 2;
        if pos > 1 << 20 {
            buf.drain(..pos);
            pos = 0;
        }
    }
}

/// `&mut dyn Read` as an `impl Read`.
struct ReadRef<'a>(&'a mut dyn Read);

impl Read for ReadRef<'_> {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(b)
    }
}

/// Parses a whole request from bytes (no deadline): what the fuzz harness
/// drives, through the same code as a socket.
pub fn parse_request(bytes: &[u8], limits: &Limits) -> Result<Request, HttpError> {
    let mut r = std::io::Cursor::new(bytes);
    let (head, start) = read_head(&mut r, limits, None)?;
    let body = read_body(&mut r, &head, start, limits, None)?;
    Ok(Request { head, body })
}

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

/// Writes a whole response (Content-Length framed, then the connection
/// closes).
pub fn write_response(w: &mut impl Write, status: u16, content_type: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    w.write_all(head.as_bytes())?;
    w.write_all(body)?;
    w.flush()
}

/// Writes the head of a response whose body runs until the connection
/// closes (a stream of events of unknown length; HTTP/1.1 section 6.3 rule 8).
pub fn write_stream_head(w: &mut impl Write, status: u16, content_type: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        reason(status)
    );
    w.write_all(head.as_bytes())?;
    w.flush()
}

/// The interim answer to `Expect: 100-continue`.
pub fn write_continue(w: &mut impl Write) -> std::io::Result<()> {
    w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Request, HttpError> {
        parse_request(s.as_bytes(), &Limits::default())
    }

    #[test]
    fn a_post_with_a_length_and_a_query_parses() {
        let r =
            parse("POST /v1/x%2Fy?path=%2Fa+b&list=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcdef").unwrap();
        assert_eq!(r.head.method, "POST");
        assert_eq!(r.head.path, "/v1/x/y");
        assert_eq!(r.head.query("path"), Some("/a b"));
        assert_eq!(r.head.query("list"), Some("1"));
        assert_eq!(r.body, b"abc");
    }

    #[test]
    fn chunked_bodies_are_joined_and_trailers_dropped() {
        let r =
            parse("PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n")
                .unwrap();
        assert_eq!(r.body, b"abcde");
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        let both = "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert!(matches!(parse(both), Err(HttpError::Malformed(_))));
        let two = "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd";
        assert!(matches!(parse(two), Err(HttpError::Malformed(_))));
        let signed = "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc";
        assert!(matches!(parse(signed), Err(HttpError::Malformed(_))));
        let gzip = "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert!(matches!(parse(gzip), Err(HttpError::Unsupported(_))));
    }

    #[test]
    fn bounds_hold_before_anything_is_read() {
        let limits = Limits { max_head: 64, max_headers: 4, max_body: 10 };
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(100));
        assert!(matches!(parse_request(big.as_bytes(), &limits), Err(HttpError::HeadTooLarge(64))));
        let many = "GET / HTTP/1.1\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\ne: 1\r\n\r\n";
        assert!(matches!(parse_request(many.as_bytes(), &limits), Err(HttpError::TooManyHeaders(4))));
        let body = "POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n";
        assert!(matches!(parse_request(body.as_bytes(), &limits), Err(HttpError::BodyTooLarge(10))));
        let chunks = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\naaaaaaaa\r\n8\r\naaaaaaaa\r\n0\r\n\r\n";
        assert!(matches!(parse_request(chunks.as_bytes(), &limits), Err(HttpError::BodyTooLarge(10))));
    }

    #[test]
    fn truncated_requests_are_incomplete_not_panics() {
        assert!(matches!(parse("GET / HTTP/1.1\r\n"), Err(HttpError::Incomplete)));
        assert!(matches!(parse("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab"), Err(HttpError::Incomplete)));
        assert!(matches!(parse("GET nope HTTP/1.1\r\n\r\n"), Err(HttpError::Malformed(_))));
    }
}
