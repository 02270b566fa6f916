//! A layer's file manifest: what unpacking wrote, recorded when it was
//! written, so a published layer can be checked later (disk corruption, a
//! stray write into `layers/`, a power loss before the kernel flushed it).
//!
//! Regular files are hashed while their data is written (the tar stream
//! is read once); after the layer's metadata is applied, one walk of the
//! build directory records every entry's type, mode, owner, symlink target
//! and opaque marker, taking each file's hash from what was written to its
//! inode. The same walk checks a published layer: quickly (types, sizes,
//! modes, owners, targets; no file is read) or fully (every file hashed).
//!
//! The walk never follows a symlink: directories are opened
//! `O_NOFOLLOW | O_DIRECTORY` relative to their parent's fd.

use super::fsutil::file_type;
use super::whiteout::OPAQUE_XATTR;
use crate::sys::Errno;
use nix::dir::Dir;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Bumped when the entry format changes; another version is "no manifest".
pub const VERSION: u32 = 1;

/// How many damaged entries a check keeps (the count is always exact).
pub const MAX_SHOWN: usize = 20;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileManifest {
    pub version: u32,
    /// Sorted by path; the layer root is ".".
    pub entries: Vec<Entry>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    /// Relative path, bytes outside printable ASCII (and `%`) as `%XX`.
    pub path: String,
    #[serde(flatten)]
    pub what: What,
    /// Permission bits, setuid/setgid/sticky included.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum What {
    File {
        size: u64,
        /// Hex; empty in a quick scan (nothing read).
        #[serde(default)]
        sha256: String,
    },
    Dir {
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        opaque: bool,
    },
    Symlink {
        target: String,
    },
    Whiteout,
    /// Anything else (unpacking never creates one).
    Other,
}

/// Hashes of the files a build wrote, by inode (a hardlink shares its
/// target's; a file replaced by a later entry gets the new one's).
pub type Written = HashMap<u64, [u8; 32]>;

/// Where a scan gets file hashes from.
pub enum Hashing<'a> {
    /// From the build that just wrote them (unpack).
    Written(&'a Written),
    /// Read every file (a full check).
    Read,
    /// None (a quick check: sizes only).
    Skip,
}

/// One entry that is not what was unpacked.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Damage {
    pub path: String,
    pub why: String,
}

/// What a check found: up to MAX_SHOWN damaged entries and their count.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Findings {
    pub damaged: Vec<Damage>,
    pub count: usize,
}

impl Findings {
    fn push(&mut self, path: &str, why: String) {
        self.count += 1;
        if self.damaged.len() < MAX_SHOWN {
            self.damaged.push(Damage { path: path.to_string(), why });
        }
    }

    pub fn is_clean(&self) -> bool {
        self.count == 0
    }

    /// "usr/bin/x: content differs ... (and 3 more)".
    pub fn summary(&self) -> String {
        let Some(first) = self.damaged.first() else { return "intact".into() };
        let more = if self.count > 1 { format!(" (and {} more)", self.count - 1) } else { String::new() };
        format!("{}: {}{more}", first.path, first.why)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {op}: {errno} ({})", errno.desc())]
pub struct ScanError {
    pub path: String,
    pub op: &'static str,
    pub errno: Errno,
}

/// Walks the tree below `root` (any fd of the layer directory) and lists
/// every entry, hashing files as `hashing` says.
pub fn scan(root: BorrowedFd<'_>, hashing: &Hashing<'_>) -> Result<FileManifest, ScanError> {
    let err = |op: &'static str| move |errno| ScanError { path: ".".into(), op, errno };
    let dir = openat(root, c".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(err("open"))?;
    let st = fstat(&dir).map_err(err("stat"))?;
    let mut entries =
        vec![Entry { path: ".".into(), what: dir_what(dir.as_fd()), mode: perm(&st), uid: st.st_uid, gid: st.st_gid }];
    walk(dir, "", hashing, &mut entries)?;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(FileManifest { version: VERSION, entries })
}

fn perm(st: &FileStat) -> u32 {
    st.st_mode & 0o7777
}

fn dir_what(dir: BorrowedFd<'_>) -> What {
    let mut buf = [0u8; 8];
    let opaque = matches!(crate::sys::xattr::fget(dir, OPAQUE_XATTR, &mut buf), Ok(1) if buf[0] == b'y');
    What::Dir { opaque }
}

fn walk(dir: OwnedFd, prefix: &str, hashing: &Hashing<'_>, out: &mut Vec<Entry>) -> Result<(), ScanError> {
    let mut names: Vec<CString> = Vec::new();
    {
        let fd = dir.try_clone().map_err(|e| ScanError {
            path: prefix.to_string(),
            op: "dup",
            errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        })?;
        let mut d = Dir::from_fd(fd).map_err(|errno| ScanError { path: prefix.to_string(), op: "opendir", errno })?;
        for e in d.iter() {
            let e = e.map_err(|errno| ScanError { path: prefix.to_string(), op: "readdir", errno })?;
            let n = e.file_name();
            if n != c"." && n != c".." {
                names.push(n.to_owned());
            }
        }
    }
    names.sort();
    for name in names {
        let path =
            if prefix.is_empty() { escape(name.to_bytes()) } else { format!("{prefix}/{}", escape(name.to_bytes())) };
        let err = |op| {
            let path = path.clone();
            move |errno| ScanError { path, op, errno }
        };
        let st = super::fsutil::lstat_at(dir.as_fd(), &name).map_err(err("stat"))?;
        let mut entry =
            Entry { path: path.clone(), what: What::Other, mode: perm(&st), uid: st.st_uid, gid: st.st_gid };
        match file_type(&st) {
            SFlag::S_IFREG => {
                let sha256 = match hashing {
                    Hashing::Skip => String::new(),
                    Hashing::Written(w) => match w.get(&st.st_ino) {
                        Some(h) => hex::encode(h),
                        // Not written by this build (cannot happen for a
                        // regular file it created): read it.
                        None => hash_file(dir.as_fd(), &name).map_err(err("read"))?,
                    },
                    Hashing::Read => hash_file(dir.as_fd(), &name).map_err(err("read"))?,
                };
                entry.what = What::File { size: st.st_size as u64, sha256 };
            }
            SFlag::S_IFLNK => {
                let target = nix::fcntl::readlinkat(dir.as_fd(), name.as_c_str()).map_err(err("readlink"))?;
                entry.what = What::Symlink { target: escape(target.as_encoded_bytes()) };
            }
            SFlag::S_IFCHR if st.st_rdev == 0 => entry.what = What::Whiteout,
            SFlag::S_IFDIR => {
                let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                match openat(dir.as_fd(), name.as_c_str(), flags, Mode::empty()) {
                    Ok(sub) => {
                        entry.what = dir_what(sub.as_fd());
                        out.push(entry);
                        walk(sub, &path, hashing, out)?;
                        continue;
                    }
                    // A directory its (rootless) owner cannot read: its
                    // content is unreachable to the unpack's walk and to
                    // every later check alike.
                    Err(Errno::EACCES) => entry.what = What::Dir { opaque: false },
                    Err(e) => return Err(err("open")(e)),
                }
            }
            _ => {}
        }
        out.push(entry);
    }
    Ok(())
}

fn hash_file(dir: BorrowedFd<'_>, name: &CStr) -> Result<String, Errno> {
    let fd = openat(dir, name, OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())?;
    super::digest::sha256_hex(std::fs::File::from(fd))
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// A path as manifest text: printable ASCII stays, every other byte (and
/// `%`) becomes `%XX`, so any name round-trips through JSON unchanged.
pub fn escape(raw: &[u8]) -> String {
    let mut s = String::with_capacity(raw.len());
    for &b in raw {
        if (0x21..0x7f).contains(&b) && b != b'%' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// Compares a scan of the layer as it is now with its manifest. A quick
/// scan (no hashes) checks everything but file content.
pub fn compare(recorded: &FileManifest, now: &FileManifest) -> Findings {
    let mut want: BTreeMap<&str, &Entry> = recorded.entries.iter().map(|e| (e.path.as_str(), e)).collect();
    let mut f = Findings::default();
    for e in &now.entries {
        let Some(r) = want.remove(e.path.as_str()) else {
            f.push(&e.path, format!("{} not in the layer as unpacked (added later)", kind(&e.what)));
            continue;
        };
        if let Some(why) = differs(r, e) {
            f.push(&e.path, why);
        }
    }
    for path in want.keys() {
        f.push(path, "missing (unpacked, since removed)".into());
    }
    f
}

fn kind(w: &What) -> &'static str {
    match w {
        What::File { .. } => "file",
        What::Dir { .. } => "directory",
        What::Symlink { .. } => "symlink",
        What::Whiteout => "whiteout",
        What::Other => "special file",
    }
}

fn differs(was: &Entry, now: &Entry) -> Option<String> {
    match (&was.what, &now.what) {
        (What::File { size: s0, sha256: h0 }, What::File { size: s1, sha256: h1 }) => {
            if s0 != s1 {
                return Some(format!("size is {s1} bytes, unpacked {s0}"));
            }
            if !h1.is_empty() && h0 != h1 {
                return Some(format!("content differs (sha256 {}, unpacked {})", short(h1), short(h0)));
            }
        }
        (What::Symlink { target: t0 }, What::Symlink { target: t1 }) if t0 != t1 => {
            return Some(format!("symlink points to {t1:?}, unpacked {t0:?}"));
        }
        (What::Dir { opaque: o0 }, What::Dir { opaque: o1 }) if o0 != o1 => {
            return Some(if *o0 { "lost its opaque marker".into() } else { "gained an opaque marker".into() });
        }
        (a, b) if std::mem::discriminant(a) != std::mem::discriminant(b) => {
            return Some(format!("is a {}, unpacked a {}", kind(b), kind(a)));
        }
        _ => {}
    }
    if was.mode != now.mode {
        return Some(format!("mode is {:04o}, unpacked {:04o}", now.mode, was.mode));
    }
    if (was.uid, was.gid) != (now.uid, now.gid) {
        return Some(format!("owner is {}:{}, unpacked {}:{}", now.uid, now.gid, was.uid, was.gid));
    }
    None
}

fn short(h: &str) -> &str {
    &h[..h.len().min(12)]
}

/// sha256 of a stream of chunks, for the writer.
pub struct FileHasher(Sha256);

impl FileHasher {
    pub fn new() -> Self {
        FileHasher(Sha256::new())
    }
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data)
    }
    pub fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
}

impl Default for FileHasher {
    fn default() -> Self {
        Self::new()
    }
}

/// The manifest file's name beside the layer directory `<key>`.
pub fn file_name(key: &str) -> String {
    format!("{key}.files.json")
}

/// Reads a manifest; None when there is none (a layer unpacked before
/// manifests existed) or it is of another version.
pub fn load(path: &std::path::Path) -> Result<Option<FileManifest>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    match serde_json::from_slice::<FileManifest>(&bytes) {
        Ok(m) if m.version == VERSION => Ok(Some(m)),
        Ok(_) => Ok(None),
        Err(e) => Err(format!("{}: the manifest is damaged ({e})", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64, sha: &str) -> Entry {
        Entry { path: path.into(), what: What::File { size, sha256: sha.into() }, mode: 0o644, uid: 0, gid: 0 }
    }

    #[test]
    fn names_round_trip_as_printable_text() {
        assert_eq!(escape(b"usr/bin/x"), "usr/bin/x");
        assert_eq!(escape(b"a b%\xff\n"), "a%20b%25%FF%0A");
    }

    #[test]
    fn changed_missing_and_added_entries_are_each_named() {
        let was = FileManifest { version: VERSION, entries: vec![file("a", 3, "aa"), file("b", 3, "bb")] };
        let now = FileManifest { version: VERSION, entries: vec![file("a", 3, "ab"), file("c", 1, "cc")] };
        let f = compare(&was, &now);
        assert_eq!(f.count, 3);
        let paths: Vec<_> = f.damaged.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["a", "c", "b"]);
        assert!(f.damaged[0].why.contains("content differs"), "{:?}", f.damaged);
        // A quick scan has no hashes: same size and type pass.
        let quick = FileManifest { version: VERSION, entries: vec![file("a", 3, ""), file("b", 3, "")] };
        assert!(compare(&was, &quick).is_clean());
        let json = serde_json::to_string(&was).unwrap();
        assert_eq!(serde_json::from_str::<FileManifest>(&json).unwrap(), was);
    }
}
