//! Content digests (`sha256:<64 hex>`) and the verifying reader every blob
//! and every uncompressed layer stream goes through.

use sha2::{Digest as _, Sha256};
use std::fmt;
use std::io::{self, Read};

/// A validated `sha256:<64 lowercase hex>` digest. Other algorithms are
/// refused: the digest also names files in the store, so it must be a
/// fixed, safe alphabet.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

/// Why a string is not a digest husk accepts (the text is cut to 80
/// characters: it may come from a hostile manifest).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error("digest {0:?}: only sha256 digests are supported")]
    Algorithm(String),
    #[error("digest {0:?}: expected sha256: and 64 lowercase hex digits")]
    Hex(String),
}

impl Digest {
    pub fn parse(s: &str) -> Result<Digest, DigestError> {
        let hex = s.strip_prefix("sha256:").ok_or_else(|| DigestError::Algorithm(truncate(s, 80)))?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(DigestError::Hex(truncate(s, 80)));
        }
        Ok(Digest { hex: hex.to_string() })
    }

    pub fn of(data: &[u8]) -> Digest {
        Digest { hex: hex::encode(Sha256::digest(data)) }
    }

    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// First 12 hex digits, for tables.
    pub fn short(&self) -> &str {
        &self.hex[..12]
    }
}

/// The sha256 of everything `r` yields, as lowercase hex (store files are
/// re-hashed in 256 KiB reads; EINTR is retried).
pub fn sha256_hex(mut r: impl Read) -> io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(hex::encode(h.finalize())),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Shortens untrusted text for error messages.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...({} bytes)", &s[..end], s.len())
}

/// What a `Verify` reader checks when its input ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Exactly this many bytes (a descriptor's size).
    Exact(u64),
    /// At most this many bytes (a bound on an uncompressed stream).
    AtMost(u64),
}

/// Hashes and counts everything read through it, and fails the read that
/// crosses the expected size, so a bomb or an oversized blob is stopped at
/// the bound instead of at its end.
pub struct Verify<R> {
    inner: R,
    /// Names the stream in a `BoundCrossed` error ("blob", "layer").
    label: &'static str,
    hasher: Sha256,
    count: u64,
    expect: Expect,
    /// Bytes read, shared with a progress display.
    pub progress: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

/// Why a verified stream was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    TooLong { limit: u64 },
    TooShort { got: u64, want: u64 },
    Digest { got: Digest },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::TooLong { limit } => write!(f, "is longer than {limit} bytes"),
            Mismatch::TooShort { got, want } => write!(f, "has {got} bytes, its descriptor says {want}"),
            Mismatch::Digest { got } => write!(f, "has digest {got}"),
        }
    }
}

/// Marker carried inside io::Error when the size bound is crossed, so the
/// caller can tell a bound from a genuine read error.
#[derive(Debug)]
pub struct BoundCrossed {
    pub label: &'static str,
    pub limit: u64,
}

impl fmt::Display for BoundCrossed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} stream is longer than {} bytes", self.label, self.limit)
    }
}

impl std::error::Error for BoundCrossed {}

impl<R: Read> Verify<R> {
    pub fn new(inner: R, expect: Expect, label: &'static str) -> Self {
        Verify { inner, label, hasher: Sha256::new(), count: 0, expect, progress: None }
    }

    fn limit(&self) -> u64 {
        match self.expect {
            Expect::Exact(n) | Expect::AtMost(n) => n,
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Reads what is left to the end, then checks size and digest.
    pub fn finish(self, want: &Digest) -> io::Result<Result<(), Mismatch>> {
        self.finish_into(Some(want)).map(|(r, _)| r)
    }

    /// `finish`, handing back the inner reader; `None` checks only the size.
    pub fn finish_into(mut self, want: Option<&Digest>) -> io::Result<(Result<(), Mismatch>, R)> {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match self.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => match bound_of(&e) {
                    Some(b) if b.label == self.label => {
                        return Ok((Err(Mismatch::TooLong { limit: b.limit }), self.inner));
                    }
                    _ => return Err(e),
                },
            }
        }
        if let Expect::Exact(n) = self.expect
            && self.count != n
        {
            return Ok((Err(Mismatch::TooShort { got: self.count, want: n }), self.inner));
        }
        let got = Digest { hex: hex::encode(self.hasher.finalize()) };
        Ok((if want.is_none_or(|w| &got == w) { Ok(()) } else { Err(Mismatch::Digest { got }) }, self.inner))
    }
}

/// The bound an io::Error reports, when it came from a `Verify` reader.
pub fn bound_of(e: &io::Error) -> Option<&BoundCrossed> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<BoundCrossed>())
}

impl<R: Read> Read for Verify<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let limit = self.limit();
        if self.count + n as u64 > limit {
            return Err(io::Error::other(BoundCrossed { label: self.label, limit }));
        }
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        if let Some(p) = &self.progress {
            p.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn digests_parse_strictly() {
        assert_eq!(Digest::parse(EMPTY).unwrap(), Digest::of(b""));
        assert!(Digest::parse("sha512:abcd").is_err());
        assert!(Digest::parse("sha256:../../etc/passwd").is_err());
        assert!(Digest::parse(&EMPTY.to_uppercase().replace("SHA256", "sha256")).is_err());
        assert!(Digest::parse(&EMPTY[..70]).is_err());
    }

    #[test]
    fn verify_reports_size_and_digest_mismatches() {
        let d = Digest::of(b"hello");
        let ok = Verify::new(&b"hello"[..], Expect::Exact(5), "blob").finish(&d).unwrap();
        assert_eq!(ok, Ok(()));
        let short = Verify::new(&b"hell"[..], Expect::Exact(5), "blob").finish(&d).unwrap();
        assert_eq!(short, Err(Mismatch::TooShort { got: 4, want: 5 }));
        let long = Verify::new(&b"hello!"[..], Expect::Exact(5), "blob").finish(&d).unwrap();
        assert_eq!(long, Err(Mismatch::TooLong { limit: 5 }));
        let other = Verify::new(&b"jello"[..], Expect::Exact(5), "blob").finish(&d).unwrap();
        assert!(matches!(other, Err(Mismatch::Digest { .. })));
    }

    #[test]
    fn bound_stops_the_read_that_crosses_it() {
        let mut v = Verify::new(std::io::repeat(0), Expect::AtMost(1000), "layer");
        let mut buf = [0u8; 600];
        assert_eq!(v.read(&mut buf).unwrap(), 600);
        let e = v.read(&mut buf).unwrap_err();
        assert_eq!(bound_of(&e).map(|b| (b.label, b.limit)), Some(("layer", 1000)));
    }
}
