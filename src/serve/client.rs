//! The client side of serve's unix socket, for husk commands that ask a
//! running `husk serve` (`husk create --pool`): one request, one response,
//! the connection closed by the server after it.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nobody listens there (no such socket, or refused).
    #[error("no husk serve answers at unix:{}: {source}", path.display())]
    Unreachable { path: PathBuf, source: std::io::Error },
    #[error("talking to husk serve at unix:{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("husk serve at unix:{} sent a malformed response: {why}", path.display())]
    Malformed { path: PathBuf, why: String },
}

/// Largest response read (a sandbox record is a few KiB).
const MAX_RESPONSE: u64 = 4 << 20;

/// `METHOD path` with a JSON body; the status and the body.
pub fn request(
    socket: &Path,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<(u16, Vec<u8>), ClientError> {
    let io = |e: std::io::Error| ClientError::Io { path: socket.to_path_buf(), source: e };
    let mut s =
        UnixStream::connect(socket).map_err(|e| ClientError::Unreachable { path: socket.to_path_buf(), source: e })?;
    s.set_read_timeout(Some(timeout)).map_err(io)?;
    s.set_write_timeout(Some(timeout)).map_err(io)?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: husk\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).and_then(|_| s.write_all(body)).map_err(io)?;
    let mut resp = Vec::new();
    s.take(MAX_RESPONSE).read_to_end(&mut resp).map_err(io)?;
    parse(&resp).map_err(|why| ClientError::Malformed { path: socket.to_path_buf(), why })
}

fn parse(resp: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Response::new(&mut headers);
    let start = match r.parse(resp).map_err(|e| e.to_string())? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Err("the response ended inside its head".into()),
    };
    let status = r.code.ok_or("no status code")?;
    let len = r
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok());
    let body = &resp[start..];
    let body = match len {
        Some(n) if n <= body.len() => &body[..n],
        Some(n) => return Err(format!("the body is {} bytes of the {n} announced", body.len())),
        None => body,
    };
    Ok((status, body.to_vec()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn responses_parse_with_and_without_length() {
        let (s, b) = super::parse(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}trailing").unwrap();
        assert_eq!((s, b.as_slice()), (201, &b"{}"[..]));
        assert!(super::parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}").is_err());
        assert!(super::parse(b"HTTP/1.1 2").is_err());
    }
}
