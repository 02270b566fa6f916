//! Files in and out of a sandbox as a tar stream (`husk cp`, `--copy-in`,
//! `--copy-out`, the files of `husk serve`): the filesystem half, with no
//! idea of sandboxes. Whoever calls it has already chosen *where* it runs:
//! inside a sandbox (a process joined into its user and mount namespaces,
//! `backend::native::copy`), or on the host.
//!
//! - `pack`: a tree -> tar, walked fd by fd, never following a symlink
//!   (a symlink is archived as one);
//! - `unpack`: tar -> a tree under one directory fd: names are refused when
//!   absolute or holding `..`, parents are opened with
//!   openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), files created
//!   O_EXCL | O_NOFOLLOW (an existing entry is unlinked first, never written
//!   through), so a symlink the stream (or the sandbox) made is never
//!   followed; total bytes and entries bounded (`Limits`);
//! - `tarw`: the writer (ustar, PAX records for long names and big sizes);
//!   the reader is `image::tar`'s, with its defences for hostile input.
//!
//! Ownership is never taken from the stream: what is written belongs to
//! the writing process (inside a sandbox: the sandbox's user; on the host:
//! the caller). Set-user/group-id bits are dropped on both sides.

pub mod list;
pub mod pack;
pub mod tarw;
pub mod unpack;

use crate::sys::Errno;
use serde::{Deserialize, Serialize};

/// Default bound on the data copied by one `husk cp` (bytes).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Default bound on the entries (files, dirs, links) of one copy.
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;

/// Bounds of one copy, checked on every side that reads or writes the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Total bytes of regular-file data.
    pub max_bytes: u64,
    pub max_entries: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bytes: DEFAULT_MAX_BYTES, max_entries: DEFAULT_MAX_ENTRIES }
    }
}

/// What one copy moved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub entries: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    /// Device nodes, FIFOs and sockets: never copied (first few paths).
    pub skipped: Vec<String>,
}

impl Report {
    fn count(&mut self, limits: &Limits, size: u64, what: &str) -> Result<(), CopyError> {
        self.entries += 1;
        self.bytes = self.bytes.saturating_add(size);
        if self.entries > limits.max_entries {
            return Err(CopyError::TooManyEntries { limit: limits.max_entries, at: what.to_string() });
        }
        if self.bytes > limits.max_bytes {
            return Err(CopyError::TooBig { limit: limits.max_bytes, at: what.to_string() });
        }
        Ok(())
    }

    fn skip(&mut self, what: String) {
        if self.skipped.len() < 8 {
            self.skipped.push(what);
        }
    }
}

/// Why a copy stopped. Serializable: the half that runs inside a sandbox
/// reports it to husk over a pipe.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CopyError {
    #[error("{path}: {}", errno_text(*errno))]
    Fs {
        path: String,
        #[serde(with = "errno_serde")]
        errno: Errno,
    },
    #[error("{path}: not found")]
    NotFound { path: String },
    #[error("tar entry {name:?} refused: {why}")]
    BadName { name: String, why: String },
    #[error("tar entry {name:?} is outside the copied tree {top:?} (a stream must hold one tree)")]
    OutsideTree { name: String, top: String },
    #[error("the copy exceeds --max-bytes {limit} at {at:?}; raise --max-bytes to copy more")]
    TooBig { limit: u64, at: String },
    #[error("the copy exceeds --max-entries {limit} at {at:?}; raise --max-entries to copy more")]
    TooManyEntries { limit: u64, at: String },
    #[error("{path} is a directory; a {what} cannot replace it")]
    ReplacesDir { path: String, what: String },
    #[error("{path} is not a directory")]
    NotDir { path: String },
    #[error("{path} is {what}, not a regular file; copy it as a tar instead")]
    NotFile { path: String, what: String },
    #[error("{path} is a symlink, and husk cp never writes through one (ELOOP)")]
    Symlink { path: String },
    #[error("malformed tar stream: {0}")]
    Tar(String),
    #[error("the tar stream: {0}")]
    Stream(String),
    #[error("the tar stream is empty (no entry to copy)")]
    Empty,
    #[error("the tar stream ended without its end-of-archive marker (its sender stopped)")]
    Truncated,
}

fn errno_text(e: Errno) -> String {
    format!("{e:?} ({})", e.desc())
}

mod errno_serde {
    use crate::sys::Errno;
    pub fn serialize<S: serde::Serializer>(e: &Errno, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i32(*e as i32)
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Errno, D::Error> {
        let n = <i32 as serde::Deserialize>::deserialize(d)?;
        Ok(Errno::from_raw(n))
    }
}

impl CopyError {
    pub fn fs(path: impl Into<String>, errno: Errno) -> CopyError {
        match errno {
            Errno::ENOENT => CopyError::NotFound { path: path.into() },
            errno => CopyError::Fs { path: path.into(), errno },
        }
    }

    pub fn errno(&self) -> Option<Errno> {
        match self {
            CopyError::Fs { errno, .. } => Some(*errno),
            CopyError::NotFound { .. } => Some(Errno::ENOENT),
            CopyError::NotDir { .. } => Some(Errno::ENOTDIR),
            CopyError::Symlink { .. } => Some(Errno::ELOOP),
            CopyError::ReplacesDir { .. } => Some(Errno::EISDIR),
            _ => None,
        }
    }

    pub(crate) fn io(e: std::io::Error) -> CopyError {
        match e.raw_os_error() {
            Some(n) => CopyError::Fs { path: "the tar stream".into(), errno: Errno::from_raw(n) },
            None => CopyError::Stream(e.to_string()),
        }
    }
}

/// The relative components of a tar entry's name. Absolute names, `..`
/// anywhere, and empty names are refused (never "cleaned": a stream that
/// holds one is not what it claims to be); `.` and empty components (a
/// trailing `/`) are dropped.
pub fn entry_components(name: &[u8]) -> Result<Vec<Vec<u8>>, CopyError> {
    let shown = || String::from_utf8_lossy(name).into_owned();
    if name.contains(&0) {
        return Err(CopyError::BadName { name: shown(), why: "NUL in the name".into() });
    }
    if name.first() == Some(&b'/') {
        return Err(CopyError::BadName { name: shown(), why: "absolute name".into() });
    }
    let mut comps = Vec::new();
    for c in name.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err(CopyError::BadName { name: shown(), why: "`..` in the name".into() }),
            c => comps.push(c.to_vec()),
        }
    }
    if comps.is_empty() {
        return Err(CopyError::BadName { name: shown(), why: "empty name".into() });
    }
    Ok(comps)
}

/// The last component of a path given by a user (`/a/b/` -> `b`), which
/// names the copied tree; `None` for `/` and paths ending in `..`.
pub fn base_name(path: &str) -> Option<&str> {
    let last = path.trim_end_matches('/').rsplit('/').next()?;
    match last {
        "" | "." | ".." => None,
        name => Some(name),
    }
}

/// Passes a tar stream on, entry by entry, with the checks of `unpack`
/// (relative names without `..`, the bounds) and nothing but files,
/// directories and symlinks: what `husk cp ID:PATH -` prints.
pub fn relay(input: &mut dyn std::io::Read, out: &mut dyn std::io::Write, limits: Limits) -> Result<Report, CopyError> {
    use crate::image::tar::{Kind, Stream, TarReader};
    use tarw::{Entry, EntryKind, TarWriter};
    let mut tar = TarReader::new(Stream(input));
    let mut w = TarWriter::new(out);
    let mut report = Report::default();
    let mut buf = vec![0u8; 64 << 10];
    while let Some(h) = tar.next_member().map_err(|e| CopyError::Tar(e.to_string()))? {
        let comps = entry_components(&h.path)?;
        let name = comps.join(&b'/');
        let shown = String::from_utf8_lossy(&name).into_owned();
        let kind = match h.kind {
            Kind::File => EntryKind::File,
            Kind::Dir => EntryKind::Dir,
            Kind::Symlink => EntryKind::Symlink,
            _ => {
                report.skip(shown);
                continue;
            }
        };
        let size = if kind == EntryKind::File { h.size } else { 0 };
        report.count(&limits, size, &shown)?;
        match kind {
            EntryKind::File => report.files += 1,
            EntryKind::Dir => report.dirs += 1,
            EntryKind::Symlink => report.symlinks += 1,
            // Skipped above: a copy carries no hard links.
            EntryKind::Hardlink => {}
        }
        let e = Entry {
            name: &name,
            kind,
            mode: h.mode & 0o1777,
            uid: h.uid.min(u32::MAX as u64) as u32,
            gid: h.gid.min(u32::MAX as u64) as u32,
            size,
            mtime: h.mtime,
            link: &h.link,
        };
        w.header(&e).map_err(CopyError::io)?;
        let mut left = size;
        while left > 0 {
            let n = tar.read_data(&mut buf).map_err(|e| CopyError::Tar(e.to_string()))?;
            w.data(&buf[..n]).map_err(CopyError::io)?;
            left -= n as u64;
        }
        w.pad(size).map_err(CopyError::io)?;
    }
    if !tar.saw_end_marker() {
        return Err(CopyError::Truncated);
    }
    w.finish().map_err(CopyError::io)?;
    Ok(report)
}

/// A tar stream of one regular file (`size` bytes of `data`).
pub fn single_file(
    out: &mut dyn std::io::Write,
    name: &[u8],
    data: &mut dyn std::io::Read,
    size: u64,
    mode: u32,
) -> Result<(), CopyError> {
    use tarw::{Entry, EntryKind, TarWriter};
    let mut w = TarWriter::new(out);
    let mtime =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let e = Entry { name, kind: EntryKind::File, mode, uid: 0, gid: 0, size, mtime, link: b"" };
    w.header(&e).map_err(CopyError::io)?;
    let copied = std::io::copy(&mut std::io::Read::take(data, size), &mut ByRef(&mut w)).map_err(CopyError::io)?;
    if copied != size {
        return Err(CopyError::Stream(format!("the file's data ended after {copied} of {size} bytes")));
    }
    w.pad(size).map_err(CopyError::io)?;
    w.finish().map_err(CopyError::io)?;
    Ok(())
}

struct ByRef<'a, W: std::io::Write>(&'a mut tarw::TarWriter<W>);

impl<W: std::io::Write> std::io::Write for ByRef<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.data(buf).map(|()| buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The data of the one regular file a stream holds, to `out`; `path` is
/// what the user named (for messages).
pub fn file_of(input: &mut dyn std::io::Read, out: &mut dyn std::io::Write, path: &str) -> Result<(), CopyError> {
    use crate::image::tar::{Kind, Stream, TarReader};
    let mut tar = TarReader::new(Stream(input));
    let Some(h) = tar.next_member().map_err(|e| CopyError::Tar(e.to_string()))? else { return Err(CopyError::Empty) };
    if h.kind != Kind::File {
        let what = match h.kind {
            Kind::Dir => "a directory",
            Kind::Symlink => "a symlink",
            _ => "a special file",
        };
        return Err(CopyError::NotFile { path: path.to_string(), what: what.into() });
    }
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = tar.read_data(&mut buf).map_err(|e| CopyError::Tar(e.to_string()))?;
        if n == 0 {
            return Ok(());
        }
        out.write_all(&buf[..n]).map_err(CopyError::io)?;
    }
}

/// A path's parent directory and last component (`/a/b/` -> `/a`, `b`;
/// `b` -> `.`, `b`); `None` when the last component names no entry of
/// its own (`/`, `..`).
pub fn split_path(path: &str) -> Option<(&str, &str)> {
    let base = base_name(path)?;
    let parent = match path.trim_end_matches('/').rsplit_once('/') {
        Some(("", _)) => "/",
        Some((p, _)) => p,
        None => ".",
    };
    Some((parent, base))
}

/// The directory holding the source `path` (opened by `resolve`'s rules)
/// and the source's name in it (not followed: a symlink is copied as one).
pub fn split_source(
    start: std::os::fd::BorrowedFd<'_>,
    path: &str,
    resolve: unpack::Resolve,
) -> Result<(std::os::fd::OwnedFd, std::ffi::CString), CopyError> {
    let Some((parent, base)) = split_path(path) else {
        return Err(CopyError::BadName {
            name: path.to_string(),
            why: "name a file or directory, not `/` or `..`".into(),
        });
    };
    let dir = unpack::open_dir(start, parent, resolve).map_err(|e| match e {
        Errno::ENOTDIR => CopyError::NotDir { path: parent.to_string() },
        e => CopyError::fs(parent, e),
    })?;
    let name = std::ffi::CString::new(base)
        .map_err(|_| CopyError::BadName { name: path.to_string(), why: "NUL in the name".into() })?;
    Ok((dir, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_and_dotdot_names_are_refused_not_cleaned() {
        assert!(matches!(entry_components(b"/etc/passwd"), Err(CopyError::BadName { .. })));
        assert!(matches!(entry_components(b"a/../../x"), Err(CopyError::BadName { .. })));
        assert!(matches!(entry_components(b".."), Err(CopyError::BadName { .. })));
        assert!(matches!(entry_components(b"./"), Err(CopyError::BadName { .. })));
        assert_eq!(entry_components(b"./a//b/").unwrap(), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(entry_components(b"a b\nc").unwrap(), vec![b"a b\nc".to_vec()]);
    }

    #[test]
    fn base_names() {
        assert_eq!(base_name("/a/b/"), Some("b"));
        assert_eq!(base_name("b"), Some("b"));
        assert_eq!(base_name("/"), None);
        assert_eq!(base_name("/a/.."), None);
    }

    #[test]
    fn errors_cross_the_pipe_intact() {
        let e = CopyError::Fs { path: "/x".into(), errno: Errno::EROFS };
        let back: CopyError = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(back, e);
    }
}
