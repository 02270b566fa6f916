//! Built layers as tar: `copy::tarw`'s writer with every member at one
//! fixed mtime, so the same tree gives the same bytes and the same inputs
//! the same diff_id.

use crate::copy::tarw::{Entry, TarWriter};
use std::io::{self, Write};

pub use crate::copy::tarw::EntryKind;

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

/// Writes a layer's members to `W`, every one with `mtime`.
pub struct StableTar<W: Write> {
    tar: TarWriter<W>,
    mtime: i64,
}

impl<W: Write> StableTar<W> {
    pub fn new(out: W, mtime: u64) -> Self {
        StableTar { tar: TarWriter::new(out), mtime: i64::try_from(mtime).unwrap_or(i64::MAX) }
    }

    /// Writes a member's header (and PAX header before it when the path or
    /// link does not fit ustar's fields).
    pub fn append(&mut self, m: &Meta) -> io::Result<()> {
        self.tar.header(&Entry {
            name: &m.path,
            kind: m.kind,
            mode: m.mode,
            uid: m.uid,
            gid: m.gid,
            size: if m.kind == EntryKind::File { m.size } else { 0 },
            mtime: self.mtime,
            link: &m.link,
        })
    }

    /// Copies exactly `size` bytes of a file's data and pads the block.
    pub fn data(&mut self, r: &mut dyn io::Read, size: u64) -> io::Result<()> {
        let mut left = size;
        let mut buf = vec![0u8; 64 << 10];
        while left > 0 {
            let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
            let n = r.read(&mut buf[..want])?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file changed size while being read"));
            }
            self.tar.data(&buf[..n])?;
            left -= n as u64;
        }
        self.tar.pad(size)
    }

    /// The two zero blocks that end an archive.
    pub fn finish(self) -> io::Result<W> {
        self.tar.finish()
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::tar::{Kind, Stream, TarReader};

    #[test]
    fn written_archives_read_back_with_long_names_and_are_byte_stable() {
        let make = || {
            let mut w = StableTar::new(Vec::new(), 7);
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
