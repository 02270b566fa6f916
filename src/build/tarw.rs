//! A deterministic tar writer for built layers: ustar headers with PAX
//! records for long names and links, numeric uid/gid and no user or group
//! names, one fixed mtime, no atime/ctime: the same tree gives the same
//! bytes, so the same inputs give the same diff_id.

use std::io::{self, Write};

const BLOCK: usize = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Hardlink,
}

/// One member's metadata (the data, for a file, follows it).
#[derive(Clone, Debug)]
pub struct Meta {
    pub path: Vec<u8>,
    pub kind: EntryKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub link: Vec<u8>,
}

/// Writes members to `W`, every one with `mtime`.
pub struct TarWriter<W: Write> {
    out: W,
    mtime: u64,
}

fn octal(field: &mut [u8], n: u64) {
    let s = format!("{:0width$o}", n, width = field.len() - 1);
    let b = s.as_bytes();
    let n = field.len();
    let start = b.len().saturating_sub(n - 1);
    field[..n - 1].copy_from_slice(&b[start..]);
    field[n - 1] = 0;
}

fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    // "LEN key=value\n", where LEN counts itself.
    let body = key.len() + value.len() + 3;
    let mut len = body + 1;
    while len.to_string().len() + body != len {
        len = body + len.to_string().len();
    }
    let mut r = format!("{len} {key}=").into_bytes();
    r.extend_from_slice(value);
    r.push(b'\n');
    r
}

impl<W: Write> TarWriter<W> {
    pub fn new(out: W, mtime: u64) -> Self {
        TarWriter { out, mtime }
    }

    fn header(&mut self, name: &[u8], typeflag: u8, m: &Meta, size: u64, link: &[u8]) -> io::Result<()> {
        let mut h = [0u8; BLOCK];
        h[..name.len().min(100)].copy_from_slice(&name[..name.len().min(100)]);
        octal(&mut h[100..108], u64::from(m.mode & 0o7777));
        octal(&mut h[108..116], u64::from(m.uid));
        octal(&mut h[116..124], u64::from(m.gid));
        octal(&mut h[124..136], size);
        octal(&mut h[136..148], self.mtime);
        h[156] = typeflag;
        h[157..157 + link.len().min(100)].copy_from_slice(&link[..link.len().min(100)]);
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
        octal(&mut h[148..155], sum);
        h[155] = b' ';
        self.out.write_all(&h)
    }

    /// Writes a member's header (and PAX header before it when the path or
    /// link does not fit ustar's fields).
    pub fn append(&mut self, m: &Meta) -> io::Result<()> {
        let mut pax = Vec::new();
        if m.path.len() > 100 {
            pax.extend(pax_record("path", &m.path));
        }
        if m.link.len() > 100 {
            pax.extend(pax_record("linkpath", &m.link));
        }
        if m.size > 0o77777777777 {
            pax.extend(pax_record("size", m.size.to_string().as_bytes()));
        }
        if !pax.is_empty() {
            let pm = Meta { mode: 0o644, uid: 0, gid: 0, ..m.clone() };
            self.header(b"././@PaxHeader", b'x', &pm, pax.len() as u64, b"")?;
            self.out.write_all(&pax)?;
            self.pad(pax.len() as u64)?;
        }
        let (flag, size) = match m.kind {
            EntryKind::File => (b'0', m.size),
            EntryKind::Dir => (b'5', 0),
            EntryKind::Symlink => (b'2', 0),
            EntryKind::Hardlink => (b'1', 0),
        };
        self.header(&m.path, flag, m, size.min(0o77777777777), &m.link)
    }

    /// Copies exactly `size` bytes of a file's data and pads the block.
    pub fn data(&mut self, r: &mut dyn io::Read, size: u64) -> io::Result<()> {
        let n = io::copy(&mut io::Read::take(&mut *r, size), &mut self.out)?;
        if n != size {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file changed size while being read"));
        }
        self.pad(size)
    }

    fn pad(&mut self, size: u64) -> io::Result<()> {
        let rem = (size % BLOCK as u64) as usize;
        if rem != 0 {
            self.out.write_all(&[0u8; BLOCK][..BLOCK - rem])?;
        }
        Ok(())
    }

    /// The two zero blocks that end an archive.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0u8; BLOCK * 2])?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::tar::{Kind, Stream, TarReader};

    #[test]
    fn written_archives_read_back_with_long_names_and_are_byte_stable() {
        let make = || {
            let mut w = TarWriter::new(Vec::new(), 7);
            let long = vec![b'a'; 150];
            w.append(&Meta {
                path: b"d/".to_vec(),
                kind: EntryKind::Dir,
                mode: 0o755,
                uid: 0,
                gid: 0,
                size: 0,
                link: vec![],
            })
            .unwrap();
            let m =
                Meta { path: long.clone(), kind: EntryKind::File, mode: 0o600, uid: 5, gid: 6, size: 3, link: vec![] };
            w.append(&m).unwrap();
            w.data(&mut &b"abc"[..], 3).unwrap();
            w.append(&Meta { path: b"l".to_vec(), kind: EntryKind::Symlink, link: long, size: 0, ..m }).unwrap();
            w.finish().unwrap()
        };
        let a = make();
        assert_eq!(a, make());
        let mut r = TarReader::new(Stream(&a[..]));
        let d = r.next_member().unwrap().unwrap();
        assert_eq!((d.kind, d.path.as_slice()), (Kind::Dir, &b"d/"[..]));
        let f = r.next_member().unwrap().unwrap();
        assert_eq!((f.kind, f.path.len(), f.uid, f.gid, f.size, f.mtime), (Kind::File, 150, 5, 6, 3, 7));
        let l = r.next_member().unwrap().unwrap();
        assert_eq!((l.kind, l.link.len()), (Kind::Symlink, 150));
        assert!(r.next_member().unwrap().is_none());
    }
}
