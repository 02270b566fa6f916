//! husk's one tar writer: ustar headers, with a PAX record set in front of
//! a member whose name or link target does not fit ustar's fields (or
//! holds bytes a ustar field cannot: none but NUL, which a path never has)
//! or whose size is past ustar's 8 GiB; numeric ids, no user or group
//! names, no atime/ctime, so the same members give the same bytes. Read
//! back by `image::tar`. `husk cp` packs with it; built layers go through
//! `build::layer_tar` (one fixed mtime) on top of it.

use std::io::{self, Write};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Hardlink,
}

/// One member's header.
pub struct Entry<'a> {
    pub name: &'a [u8],
    pub kind: EntryKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime: i64,
    pub link: &'a [u8],
}

pub struct TarWriter<W> {
    out: W,
}

/// ustar's size field holds 11 octal digits.
const MAX_USTAR_SIZE: u64 = 0o77777777777;

impl<W: Write> TarWriter<W> {
    pub fn new(out: W) -> Self {
        TarWriter { out }
    }

    /// Writes a member's header; a file's `size` bytes must follow
    /// (`data`), then `pad`.
    pub fn header(&mut self, e: &Entry<'_>) -> io::Result<()> {
        let mut name = e.name.to_vec();
        if e.kind == EntryKind::Dir && name.last() != Some(&b'/') {
            name.push(b'/');
        }
        let mut pax = Vec::new();
        if name.len() > 100 {
            pax_record(&mut pax, b"path", &name);
        }
        if e.link.len() > 100 {
            pax_record(&mut pax, b"linkpath", e.link);
        }
        if e.size > MAX_USTAR_SIZE {
            pax_record(&mut pax, b"size", e.size.to_string().as_bytes());
        }
        if !pax.is_empty() {
            let h = block(b"././@PaxHeader", b'x', 0o644, 0, 0, pax.len() as u64, e.mtime, b"");
            self.out.write_all(&h)?;
            self.out.write_all(&pax)?;
            self.pad(pax.len() as u64)?;
        }
        let flag = match e.kind {
            EntryKind::File => b'0',
            EntryKind::Dir => b'5',
            EntryKind::Symlink => b'2',
            EntryKind::Hardlink => b'1',
        };
        let size = if e.kind == EntryKind::File { e.size.min(MAX_USTAR_SIZE) } else { 0 };
        let h = block(&name, flag, e.mode, e.uid, e.gid, size, e.mtime, e.link);
        self.out.write_all(&h)
    }

    pub fn data(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.write_all(buf)
    }

    /// Zeros up to the next 512-byte block after `size` bytes of data.
    pub fn pad(&mut self, size: u64) -> io::Result<()> {
        let n = ((512 - size % 512) % 512) as usize;
        self.out.write_all(&[0u8; 512][..n])
    }

    /// The end-of-archive marker (two zero blocks); returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0u8; 1024])?;
        self.out.flush()?;
        Ok(self.out)
    }
}

fn pax_record(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    // "LEN KEY=VALUE\n", LEN counting itself.
    let body = key.len() + value.len() + 3;
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    out.extend_from_slice(len.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
    out.push(b'=');
    out.extend_from_slice(value);
    out.push(b'\n');
}

#[allow(clippy::too_many_arguments)]
fn block(name: &[u8], flag: u8, mode: u32, uid: u32, gid: u32, size: u64, mtime: i64, link: &[u8]) -> [u8; 512] {
    let mut h = [0u8; 512];
    let put = |h: &mut [u8; 512], at: usize, len: usize, v: &[u8]| {
        let n = v.len().min(len);
        h[at..at + n].copy_from_slice(&v[..n]);
    };
    let octal = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
        let s = format!("{:0w$o}", v, w = len - 1);
        // A value too wide for the field is written truncated; the PAX
        // record in front carries the real one.
        put(h, at, len - 1, &s.as_bytes()[s.len().saturating_sub(len - 1)..]);
    };
    put(&mut h, 0, 100, name);
    octal(&mut h, 100, 8, (mode & 0o7777) as u64);
    octal(&mut h, 108, 8, (uid as u64).min(0o7777777));
    octal(&mut h, 116, 8, (gid as u64).min(0o7777777));
    octal(&mut h, 124, 12, size);
    octal(&mut h, 136, 12, mtime.max(0) as u64);
    h[156] = flag;
    put(&mut h, 157, 100, link);
    put(&mut h, 257, 8, b"ustar\x0000");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| *b as u32).sum();
    put(&mut h, 148, 8, format!("{sum:06o}\0 ").as_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::tar::{Kind, Stream, TarReader};

    #[test]
    fn long_names_and_links_round_trip_through_husks_reader() {
        let long = format!("dir/{}/with space\nand newline", "x".repeat(150));
        let link = format!("/{}", "t".repeat(200));
        let mut w = TarWriter::new(Vec::new());
        let e = |name: &'static [u8], kind, size| Entry {
            name,
            kind,
            mode: 0o755,
            uid: 0,
            gid: 0,
            size,
            mtime: 7,
            link: b"",
        };
        w.header(&e(b"dir", EntryKind::Dir, 0)).unwrap();
        let long_entry = Entry {
            name: long.as_bytes(),
            kind: EntryKind::File,
            mode: 0o600,
            uid: 1,
            gid: 2,
            size: 3,
            mtime: 9,
            link: b"",
        };
        w.header(&long_entry).unwrap();
        w.data(b"abc").unwrap();
        w.pad(3).unwrap();
        let l = Entry {
            name: b"dir/l",
            kind: EntryKind::Symlink,
            mode: 0o777,
            uid: 0,
            gid: 0,
            size: 0,
            mtime: 0,
            link: link.as_bytes(),
        };
        w.header(&l).unwrap();
        let bytes = w.finish().unwrap();
        let mut r = TarReader::new(Stream(&bytes[..]));
        let d = r.next_member().unwrap().unwrap();
        assert_eq!((d.kind, d.path.as_slice()), (Kind::Dir, &b"dir/"[..]));
        let f = r.next_member().unwrap().unwrap();
        assert_eq!((f.kind, f.path.as_slice(), f.size, f.mode & 0o7777), (Kind::File, long.as_bytes(), 3, 0o600));
        let mut buf = [0u8; 8];
        assert_eq!(r.read_data(&mut buf).unwrap(), 3);
        let s = r.next_member().unwrap().unwrap();
        assert_eq!((s.kind, s.link.as_slice()), (Kind::Symlink, link.as_bytes()));
        assert!(r.next_member().unwrap().is_none());
    }
}
