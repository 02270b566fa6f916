//! A tar reader for hostile input: ustar, GNU long names and PAX headers,
//! with every metadata block bounded (a crafted 10 GB long-name entry must
//! not be read into memory) and every number checked. Headers are parsed
//! here; what they *mean* for the filesystem is decided in `unpack`.

use std::io::{self, Read, Seek, SeekFrom};

const BLOCK: u64 = 512;
/// Bound on one GNU long name / long link or PAX header block set.
pub const MAX_META: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Hardlink,
    Symlink,
    Char,
    Block,
    Dir,
    Fifo,
}

/// One member, with GNU/PAX extensions applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub path: Vec<u8>,
    pub link: Vec<u8>,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub size: u64,
    pub mtime: i64,
    pub devmajor: u64,
    pub devminor: u64,
    /// SCHILY.xattr.* records (name without the prefix, raw value).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Offset of the member's data in the stream.
    pub data_offset: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum TarError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("malformed tar at byte {offset}: {why}")]
    Format { offset: u64, why: Malformed },
}

/// What is wrong with a tar stream (hostile input: each case is refused).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Malformed {
    #[error("truncated header block")]
    TruncatedHeader,
    #[error("metadata member of {0} bytes (bound {MAX_META})")]
    MetaTooBig(u64),
    #[error("stream ends inside a metadata member")]
    TruncatedMeta,
    #[error("extension header without a member")]
    DanglingExtension,
    #[error("checksum field: {0}")]
    ChecksumField(NumberError),
    #[error("header checksum mismatch")]
    Checksum,
    #[error("{field}: {source}")]
    Field { field: &'static str, source: NumberError },
    #[error("PAX header: {0}")]
    Pax(#[from] PaxError),
    #[error("GNU sparse members are not supported; rebuild the layer without --sparse")]
    Sparse,
    #[error("unsupported member type {0:?}")]
    MemberType(char),
}

/// A numeric header field that is not a number husk takes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NumberError {
    #[error("negative base-256 number")]
    Negative,
    #[error("base-256 number overflows")]
    Overflow,
    #[error("not octal")]
    NotText,
    #[error("{0:?} is not an octal number")]
    NotOctal(String),
}

/// A PAX extended header husk refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PaxError {
    #[error("record without a length")]
    NoLength,
    #[error("record length is not a number")]
    BadLength,
    #[error("record length does not match its content")]
    LengthMismatch,
    #[error("record without '='")]
    NoEquals,
    #[error("bad number")]
    BadNumber,
    #[error("GNU sparse members are not supported")]
    Sparse,
}

/// Input a `TarReader` can skip over: streams read and discard, files seek.
pub trait TarInput: Read {
    fn skip(&mut self, n: u64) -> io::Result<()> {
        let copied = io::copy(&mut (&mut *self).take(n), &mut io::sink())?;
        if copied < n {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "tar stream ends inside a member"));
        }
        Ok(())
    }
}

/// A plain stream (a decompressed layer).
pub struct Stream<R>(pub R);

impl<R: Read> Read for Stream<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read> TarInput for Stream<R> {}

/// A seekable file (an image archive being indexed).
pub struct Seekable<R>(pub R);

impl<R: Read> Read for Seekable<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read + Seek> TarInput for Seekable<R> {
    fn skip(&mut self, n: u64) -> io::Result<()> {
        let n = i64::try_from(n).map_err(io::Error::other)?;
        self.0.seek(SeekFrom::Current(n)).map(|_| ())
    }
}

pub struct TarReader<R> {
    inner: R,
    pos: u64,
    /// Unread data of the current member, then its padding.
    remaining: u64,
    padding: u64,
    done: bool,
    /// The end-of-archive marker was read (not a bare end of input).
    marker: bool,
}

impl<R: TarInput> TarReader<R> {
    pub fn new(inner: R) -> Self {
        TarReader { inner, pos: 0, remaining: 0, padding: 0, done: false, marker: false }
    }

    /// Whether the stream ended with its end-of-archive marker: a stream
    /// cut short at a member boundary ends without one.
    pub fn saw_end_marker(&self) -> bool {
        self.marker
    }

    pub fn into_inner(self) -> R {
        self.inner
    }

    fn bad(&self, why: Malformed) -> TarError {
        TarError::Format { offset: self.pos, why }
    }

    fn skip(&mut self, n: u64) -> Result<(), TarError> {
        if n > 0 {
            self.inner.skip(n)?;
            self.pos += n;
        }
        Ok(())
    }

    /// Reads exactly one block; Ok(false) at a clean end of input.
    fn block(&mut self, buf: &mut [u8; 512]) -> Result<bool, TarError> {
        let mut got = 0;
        while got < buf.len() {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => return Err(self.bad(Malformed::TruncatedHeader)),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.pos += BLOCK;
        Ok(true)
    }

    /// Reads the data of a metadata member (long name, PAX), bounded.
    fn meta(&mut self, size: u64) -> Result<Vec<u8>, TarError> {
        if size > MAX_META {
            return Err(self.bad(Malformed::MetaTooBig(size)));
        }
        let mut data = vec![0u8; size as usize];
        self.inner.read_exact(&mut data).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => self.bad(Malformed::TruncatedMeta),
            _ => TarError::Io(e),
        })?;
        self.pos += size;
        self.skip(pad(size))?;
        Ok(data)
    }

    /// Next member; the unread rest of the previous one is skipped. None at
    /// the end-of-archive marker (a zero block) or a clean end of input.
    pub fn next_member(&mut self) -> Result<Option<Header>, TarError> {
        if self.done {
            return Ok(None);
        }
        let rest = self.remaining + self.padding;
        self.remaining = 0;
        self.padding = 0;
        self.skip(rest)?;
        let mut long_name = None;
        let mut long_link = None;
        let mut pax: Option<Pax> = None;
        let mut buf = [0u8; 512];
        loop {
            if !self.block(&mut buf)? {
                if long_name.is_some() || long_link.is_some() || pax.is_some() {
                    return Err(self.bad(Malformed::DanglingExtension));
                }
                self.done = true;
                return Ok(None);
            }
            if buf.iter().all(|&b| b == 0) {
                self.done = true;
                self.marker = true;
                return Ok(None);
            }
            verify_checksum(&buf).map_err(|why| self.bad(why))?;
            let size = number(&buf[124..136]).map_err(|source| self.bad(Malformed::Field { field: "size", source }))?;
            match buf[156] {
                b'L' => long_name = Some(strip_nul(self.meta(size)?)),
                b'K' => long_link = Some(strip_nul(self.meta(size)?)),
                b'x' => {
                    let data = self.meta(size)?;
                    pax = Some(Pax::parse(&data).map_err(|e| self.bad(e.into()))?);
                }
                // Global PAX headers carry defaults nothing in an image needs.
                b'g' => {
                    self.meta(size)?;
                }
                _ => break,
            }
        }
        let h = self.member(&buf, long_name, long_link, pax)?;
        if h.kind == Kind::File {
            self.remaining = h.size;
            self.padding = pad(h.size);
        }
        Ok(Some(h))
    }

    fn member(
        &self,
        b: &[u8; 512],
        long_name: Option<Vec<u8>>,
        long_link: Option<Vec<u8>>,
        pax: Option<Pax>,
    ) -> Result<Header, TarError> {
        let field = |field: &'static str, r: std::ops::Range<usize>| {
            number(&b[r]).map_err(|source| self.bad(Malformed::Field { field, source }))
        };
        let ustar = &b[257..263] == b"ustar\0";
        let mut path = cstr_field(&b[0..100]);
        if ustar && b[345] != 0 {
            let mut p = cstr_field(&b[345..500]);
            p.push(b'/');
            p.extend_from_slice(&path);
            path = p;
        }
        let mut h = Header {
            path,
            link: cstr_field(&b[157..257]),
            kind: Kind::File,
            mode: (field("mode", 100..108)? & 0o7777) as u32,
            uid: field("uid", 108..116)?,
            gid: field("gid", 116..124)?,
            size: field("size", 124..136)?,
            mtime: field("mtime", 136..148)? as i64,
            devmajor: 0,
            devminor: 0,
            xattrs: Vec::new(),
            data_offset: self.pos,
        };
        if let Some(n) = long_name {
            h.path = n;
        }
        if let Some(l) = long_link {
            h.link = l;
        }
        if let Some(p) = pax {
            p.apply(&mut h);
        }
        // Times outside 1970..2514 are clamped rather than refused: they
        // mean nothing for a sandbox, and futimens would reject some.
        h.mtime = h.mtime.clamp(0, 1 << 34);
        h.kind = match b[156] {
            b'0' | b'\0' | b'7' if h.path.ends_with(b"/") => Kind::Dir,
            b'0' | b'\0' | b'7' => Kind::File,
            b'1' => Kind::Hardlink,
            b'2' => Kind::Symlink,
            b'3' => Kind::Char,
            b'4' => Kind::Block,
            b'5' => Kind::Dir,
            b'6' => Kind::Fifo,
            b'S' => return Err(self.bad(Malformed::Sparse)),
            t => return Err(self.bad(Malformed::MemberType(t as char))),
        };
        if matches!(h.kind, Kind::Char | Kind::Block) {
            h.devmajor = field("devmajor", 329..337).unwrap_or(0);
            h.devminor = field("devminor", 337..345).unwrap_or(0);
        }
        // Like Go's archive/tar: only regular files carry data.
        if h.kind != Kind::File {
            h.size = 0;
        }
        Ok(h)
    }

    /// Reads data of the current member (0 at its end).
    pub fn read_data(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            return Ok(0);
        }
        let want = buf.len().min(self.remaining.min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "tar stream ends inside a member's data"));
        }
        self.remaining -= n as u64;
        self.pos += n as u64;
        Ok(n)
    }

    /// The underlying input, past the end-of-archive marker (to drain it).
    pub fn inner_mut(&mut self) -> &mut R {
        &mut self.inner
    }
}

fn pad(size: u64) -> u64 {
    (BLOCK - size % BLOCK) % BLOCK
}

fn strip_nul(mut v: Vec<u8>) -> Vec<u8> {
    if let Some(i) = v.iter().position(|&b| b == 0) {
        v.truncate(i);
    }
    v
}

fn cstr_field(f: &[u8]) -> Vec<u8> {
    strip_nul(f.to_vec())
}

fn verify_checksum(b: &[u8; 512]) -> Result<(), Malformed> {
    let want = number(&b[148..156]).map_err(Malformed::ChecksumField)?;
    let unsigned: u64 = b.iter().enumerate().map(|(i, &x)| if (148..156).contains(&i) { 32 } else { x as u64 }).sum();
    let signed: i64 =
        b.iter().enumerate().map(|(i, &x)| if (148..156).contains(&i) { 32 } else { x as i8 as i64 }).sum();
    if want == unsigned || want as i64 == signed { Ok(()) } else { Err(Malformed::Checksum) }
}

/// Octal (NUL/space padded) or GNU base-256 numbers.
pub fn number(f: &[u8]) -> Result<u64, NumberError> {
    if f.first().is_some_and(|&b| b & 0x80 != 0) {
        if f[0] == 0xff {
            return Err(NumberError::Negative);
        }
        let mut v: u64 = (f[0] & 0x7f) as u64;
        for &b in &f[1..] {
            v = v.checked_mul(256).and_then(|v| v.checked_add(b as u64)).ok_or(NumberError::Overflow)?;
        }
        return Ok(v);
    }
    let digits: Vec<u8> =
        f.iter().copied().skip_while(|&b| b == b' ' || b == 0).take_while(|&b| b != b' ' && b != 0).collect();
    if digits.is_empty() {
        return Ok(0);
    }
    let s = std::str::from_utf8(&digits).map_err(|_| NumberError::NotText)?;
    u64::from_str_radix(s, 8).map_err(|_| NumberError::NotOctal(s.into()))
}

/// Local PAX records relevant to extraction.
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    size: Option<u64>,
    uid: Option<u64>,
    gid: Option<u64>,
    mtime: Option<i64>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Pax {
    fn parse(data: &[u8]) -> Result<Pax, PaxError> {
        let mut pax = Pax::default();
        let mut rest = data;
        while !rest.is_empty() {
            if rest.iter().all(|&b| b == 0) {
                break;
            }
            let sp = rest.iter().position(|&b| b == b' ').ok_or(PaxError::NoLength)?;
            let len: usize =
                std::str::from_utf8(&rest[..sp]).ok().and_then(|s| s.parse().ok()).ok_or(PaxError::BadLength)?;
            if len <= sp + 1 || len > rest.len() || rest[len - 1] != b'\n' {
                return Err(PaxError::LengthMismatch);
            }
            let rec = &rest[sp + 1..len - 1];
            let eq = rec.iter().position(|&b| b == b'=').ok_or(PaxError::NoEquals)?;
            let (key, value) = (&rec[..eq], &rec[eq + 1..]);
            let num = |v: &[u8]| -> Result<u64, PaxError> {
                std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()).ok_or(PaxError::BadNumber)
            };
            match key {
                b"path" => pax.path = Some(value.to_vec()),
                b"linkpath" => pax.link = Some(value.to_vec()),
                b"size" => pax.size = Some(num(value)?),
                b"uid" => pax.uid = Some(num(value)?),
                b"gid" => pax.gid = Some(num(value)?),
                b"mtime" => {
                    let whole = value.split(|&b| b == b'.').next().unwrap_or(b"0");
                    let neg = whole.first() == Some(&b'-');
                    let secs = num(if neg { &whole[1..] } else { whole })? as i64;
                    pax.mtime = Some(if neg { -secs } else { secs });
                }
                k if k.starts_with(b"GNU.sparse.") => {
                    return Err(PaxError::Sparse);
                }
                k if k.starts_with(b"SCHILY.xattr.") => {
                    pax.xattrs.push((k[b"SCHILY.xattr.".len()..].to_vec(), value.to_vec()));
                }
                _ => {}
            }
            rest = &rest[len..];
        }
        Ok(pax)
    }

    fn apply(self, h: &mut Header) {
        if let Some(p) = self.path {
            h.path = p;
        }
        if let Some(l) = self.link {
            h.link = l;
        }
        if let Some(s) = self.size {
            h.size = s;
        }
        if let Some(u) = self.uid {
            h.uid = u;
        }
        if let Some(g) = self.gid {
            h.gid = g;
        }
        if let Some(m) = self.mtime {
            h.mtime = m;
        }
        h.xattrs = self.xattrs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_octal_and_base256() {
        assert_eq!(number(b"0000644\0").unwrap(), 0o644);
        assert_eq!(number(b"  755 \0").unwrap(), 0o755);
        assert_eq!(number(b"\0\0\0").unwrap(), 0);
        assert_eq!(number(&[0x80, 0, 0, 0, 0, 0, 1, 0]).unwrap(), 256);
        assert!(number(&[0xff; 8]).is_err());
        assert!(number(&[0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(number(b"0009\0").is_err());
    }

    #[test]
    fn pax_records_parse_and_bad_lengths_are_refused() {
        let p = Pax::parse(b"27 path=a/very/long/name/x\n20 SCHILY.xattr.u=v\n").unwrap();
        assert_eq!(p.path.as_deref(), Some(&b"a/very/long/name/x"[..]));
        assert_eq!(p.xattrs, vec![(b"u".to_vec(), b"v".to_vec())]);
        assert!(Pax::parse(b"99 path=x\n").is_err());
        assert!(Pax::parse(b"x path=x\n").is_err());
        assert!(Pax::parse(b"22 GNU.sparse.major=1\n").is_err());
    }
}
