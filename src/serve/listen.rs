//! Where `husk serve` listens: a unix socket only its owner can connect to
//! (the default), or loopback TCP behind a bearer token.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What `--listen` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Unix(PathBuf),
    Tcp(std::net::SocketAddr),
}

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error(
        "--listen {0:?} is neither unix:PATH nor a loopback IP:PORT (e.g. unix:/run/husk/api.sock or 127.0.0.1:7070)"
    )]
    Syntax(String),
    #[error(
        "--listen {0}: husk serve listens on TCP only on a loopback address (127.0.0.1, ::1); anything else would put sandboxes on the network"
    )]
    NotLoopback(std::net::SocketAddr),
    #[error("--listen {0}: TCP needs --token-file FILE (every request must then carry Authorization: Bearer <token>)")]
    NoToken(std::net::SocketAddr),
    #[error("--token-file {path}: {why}")]
    Token { path: PathBuf, why: String },
    #[error("socket path {path} is {len} bytes; a unix socket path has at most 107: pick a shorter --listen unix:PATH")]
    PathTooLong { path: PathBuf, len: usize },
    #[error(
        "{path} exists and is not a stale husk serve socket of uid {uid} ({what}); remove it or pick another --listen unix:PATH"
    )]
    Occupied { path: PathBuf, uid: u32, what: String },
    #[error("{path}: another husk serve is listening there")]
    InUse { path: PathBuf },
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
}

impl ListenError {
    pub fn errno(&self) -> Option<i32> {
        match self {
            ListenError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// Parses `--listen`: `unix:PATH`, a path with a `/`, or `IP:PORT`.
pub fn parse(s: &str) -> Result<Address, ListenError> {
    if let Some(p) = s.strip_prefix("unix:") {
        if p.is_empty() {
            return Err(ListenError::Syntax(s.into()));
        }
        return Ok(Address::Unix(PathBuf::from(p)));
    }
    if s.starts_with('/') || s.starts_with("./") {
        return Ok(Address::Unix(PathBuf::from(s)));
    }
    let addr: std::net::SocketAddr = s.parse().map_err(|_| ListenError::Syntax(s.into()))?;
    if !addr.ip().is_loopback() {
        return Err(ListenError::NotLoopback(addr));
    }
    Ok(Address::Tcp(addr))
}

/// The token from `--token-file`: one line, at least 16 bytes (a short
/// token is guessable by anyone on the host who can reach loopback).
pub fn read_token(path: &Path) -> Result<Vec<u8>, ListenError> {
    let bytes = crate::userfile::read("token file", path, 4096)
        .map_err(|e| ListenError::Token { path: path.into(), why: e.to_string() })?;
    let text =
        String::from_utf8(bytes).map_err(|_| ListenError::Token { path: path.into(), why: "not UTF-8 text".into() })?;
    let token = text.trim();
    if token.len() < 16 || token.contains(char::is_whitespace) {
        return Err(ListenError::Token {
            path: path.into(),
            why: "the token must be one word of at least 16 characters (e.g. `openssl rand -hex 32 > FILE`)".into(),
        });
    }
    Ok(token.as_bytes().to_vec())
}

/// Compares a presented token with ours in time that depends only on the
/// presented length, so the comparison leaks nothing of our token.
pub fn token_matches(ours: &[u8], presented: &[u8]) -> bool {
    let mut diff = (ours.len() ^ presented.len()) as u64;
    for (i, b) in presented.iter().enumerate() {
        let o = ours.get(i % ours.len().max(1)).copied().unwrap_or(0);
        diff |= u64::from(o ^ b);
    }
    diff == 0 && !ours.is_empty()
}

/// Binds the unix socket at `path`, mode 0600, owned by the caller.
///
/// What may already be there: nothing, or a socket of ours nobody listens
/// on (a serve that was SIGKILLed), which is replaced. Anything else (a
/// file, a symlink, someone else's socket, a live serve) is refused:
/// `lstat`, never following a symlink, and `bind` itself never follows one
/// nor replaces anything.
pub fn bind_unix(path: &Path) -> Result<std::os::unix::net::UnixListener, ListenError> {
    let len = path.as_os_str().len();
    if len > 107 {
        return Err(ListenError::PathTooLong { path: path.into(), len });
    }
    let io = |what, source| ListenError::Io { what, path: path.into(), source };
    let uid = nix::unistd::geteuid().as_raw();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io("creating the socket's directory", e))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            let occupied = |what: &str| ListenError::Occupied { path: path.into(), uid, what: what.into() };
            if !m.file_type().is_socket() {
                return Err(occupied(if m.file_type().is_symlink() { "a symlink" } else { "not a socket" }));
            }
            if m.uid() != uid {
                return Err(occupied(&format!("a socket of uid {}", m.uid())));
            }
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => return Err(ListenError::InUse { path: path.into() }),
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    std::fs::remove_file(path).map_err(|e| io("removing the stale socket", e))?;
                }
                Err(e) => return Err(io("probing the existing socket", e)),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("checking the socket path", e)),
    }
    // The mode comes from the umask at bind time: a chmod after bind would
    // leave a moment in which others could connect.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = std::os::unix::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    bound.map_err(|e| io("binding", e))
}

/// Removes our socket when serve ends, unless something else took the
/// path since (a newer serve's socket has another inode).
pub fn remove_unix(path: &Path, ino: u64) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.ino() == ino && m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

use std::os::unix::fs::DirBuilderExt;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unix_paths_and_loopback_addresses_are_listened_on() {
        assert_eq!(parse("unix:/tmp/a.sock").unwrap(), Address::Unix("/tmp/a.sock".into()));
        assert!(matches!(parse("127.0.0.1:7070"), Ok(Address::Tcp(_))));
        assert!(matches!(parse("[::1]:7070"), Ok(Address::Tcp(_))));
        assert!(matches!(parse("0.0.0.0:7070"), Err(ListenError::NotLoopback(_))));
        assert!(matches!(parse("10.0.0.1:80"), Err(ListenError::NotLoopback(_))));
        assert!(matches!(parse("localhost"), Err(ListenError::Syntax(_))));
    }

    #[test]
    fn tokens_match_only_exactly() {
        let t = b"0123456789abcdef";
        assert!(token_matches(t, t));
        assert!(!token_matches(t, b"0123456789abcdeF"));
        assert!(!token_matches(t, b"0123456789abcde"));
        assert!(!token_matches(t, b"0123456789abcdef0"));
        assert!(!token_matches(t, b""));
        assert!(!token_matches(b"", b""));
    }
}
