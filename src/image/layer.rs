//! Writing one layer's entries into its private build directory. Every
//! operation is relative to an fd of that directory and never follows a
//! symlink: parents are opened with openat2(RESOLVE_NO_SYMLINKS |
//! RESOLVE_BENEATH) (an entry whose parent is a symlink is refused, the
//! shape of every "write through a planted symlink" escape), files are
//! created O_EXCL|O_NOFOLLOW, and metadata is applied to fds we opened or
//! with AT_SYMLINK_NOFOLLOW, never to a re-resolved path (CVE-2021-32760).

use super::fsutil::{self, cname, file_type, is_whiteout, join, lstat_at, open_beneath, open_dir_path};
use super::manifest::{self, FileHasher, FileManifest, Hashing, Written};
use super::tar::{Header, Kind};
use super::whiteout::{Meaning, NameError, display};
use crate::spec::IdRange;
use crate::sys::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, UtimensatFlags, fchmod, futimens, mkdirat, mknodat, utimensat};
use nix::sys::time::TimeSpec;
use nix::unistd::{Gid, Uid, fchown, fchownat};
use std::ffi::CStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub use super::whiteout::OPAQUE_XATTR;

/// Who owns unpacked files on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owners {
    /// As root: image id N becomes host id base+N, so it appears as N
    /// inside a sandbox whose ids map onto this range. Ids past the range
    /// become the range's overflow id (65534, "nobody").
    Shift { uid: IdRange, gid: IdRange },
    /// Rootless: everything belongs to the invoking user (sandbox root);
    /// other owners cannot be represented without subordinate ids.
    Invoker,
}

impl Owners {
    /// Suffix of layer directory names: one unpacked copy per id mapping.
    pub fn key_suffix(&self) -> String {
        match self {
            Owners::Invoker => String::new(),
            Owners::Shift { uid, gid } if uid == gid => format!(".{}-{}", uid.base, uid.count),
            Owners::Shift { uid, gid } => format!(".{}-{}-{}-{}", uid.base, uid.count, gid.base, gid.count),
        }
    }

    fn map(&self, uid: u64, gid: u64, clamped: &mut u64) -> Option<(u32, u32)> {
        let shift = |id: u64, r: &IdRange, clamped: &mut u64| {
            if id < r.count as u64 {
                r.base + id as u32
            } else {
                *clamped += 1;
                r.base + if r.count > 65534 { 65534 } else { r.count - 1 }
            }
        };
        match self {
            Owners::Invoker => None,
            Owners::Shift { uid: ur, gid: gr } => Some((shift(uid, ur, clamped), shift(gid, gr, clamped))),
        }
    }
}

/// What unpacking one layer did, for the import report.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct UnpackReport {
    pub entries: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub hardlinks: u64,
    pub whiteouts: u64,
    pub opaque_dirs: u64,
    /// Bytes of regular-file data written.
    pub bytes: u64,
    /// Device nodes and FIFOs (not created: the sandbox mounts nodev and
    /// gets its own /dev), first few paths.
    pub skipped: Vec<String>,
    pub skipped_count: u64,
    /// `security.capability` attributes dropped (file capabilities).
    pub capabilities_dropped: u64,
    /// Other xattrs dropped (only `user.*` ones are kept).
    pub xattrs_dropped: u64,
    /// Owners outside the id range, mapped to its overflow id.
    pub ids_clamped: u64,
    /// Entries owned by someone other than root, which a rootless store
    /// gives to the invoking user.
    pub owners_flattened: u64,
}

/// A finished layer build: the report and the file manifest to publish
/// beside it.
#[derive(Clone, Debug)]
pub struct Unpacked {
    pub report: UnpackReport,
    pub files: FileManifest,
}

#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("entry {entry:?}: {err}")]
    Name { entry: String, err: NameError },
    #[error("entry {entry:?}: {why}")]
    Refused { entry: String, why: String },
    #[error("entry {entry:?}: {op}: {errno} ({})", errno.desc())]
    Sys { entry: String, op: &'static str, errno: Errno },
    #[error("reading the layer stream: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Tar(#[from] super::tar::TarError),
    #[error("{what} exceeds the bound of {limit} (raise it with --max-layer-size / --max-entries)")]
    Bound { what: &'static str, limit: u64 },
    #[error("cancelled (another layer failed)")]
    Cancelled,
    #[error("recording the layer's file manifest: {0}")]
    Manifest(#[from] super::manifest::ScanError),
}

struct DirMeta {
    comps: Vec<Vec<u8>>,
    mode: u32,
    /// The mode mkdir gave it, when that is already final (saves a chmod).
    created: Option<u32>,
    ids: Option<(u32, u32)>,
    mtime: Option<i64>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

pub struct LayerWriter {
    root: OwnedFd,
    owners: Owners,
    /// Most recently used parent directory (entries arrive in tree order).
    cache: Option<(Vec<Vec<u8>>, OwnedFd)>,
    dirs: Vec<DirMeta>,
    buf: Vec<u8>,
    max_file: u64,
    /// The process umask when the caller knows it (import sets 0 while it
    /// runs): creation modes are then exact and most chmods can be skipped.
    umask: Option<u32>,
    /// Hash of each file written, by inode, for the manifest.
    written: Written,
    pub report: UnpackReport,
}

const MAX_SKIPPED_SHOWN: usize = 20;
const MAX_XATTR_VALUE: usize = 64 << 10;

impl LayerWriter {
    /// `root`: O_PATH fd of the empty build directory.
    pub fn new(root: OwnedFd, owners: Owners, max_file: u64, umask: Option<u32>) -> Self {
        let root_meta =
            DirMeta { comps: Vec::new(), mode: 0o755, created: None, ids: None, mtime: None, xattrs: Vec::new() };
        let mut w = LayerWriter {
            root,
            owners,
            cache: None,
            dirs: vec![root_meta],
            buf: vec![0u8; 256 << 10],
            max_file,
            umask,
            written: Written::new(),
            report: UnpackReport::default(),
        };
        w.dirs[0].ids = w.ids(0, 0);
        w
    }

    fn ids(&mut self, uid: u64, gid: u64) -> Option<(u32, u32)> {
        if self.owners == Owners::Invoker && (uid != 0 || gid != 0) {
            self.report.owners_flattened += 1;
        }
        self.owners.map(uid, gid, &mut self.report.ids_clamped)
    }

    /// Applies one entry. `comps` is its validated path, `data` its content.
    pub fn apply(
        &mut self,
        h: &Header,
        comps: Vec<Vec<u8>>,
        meaning: Meaning,
        data: &mut dyn Read,
    ) -> Result<(), UnpackError> {
        self.report.entries += 1;
        let entry = display(&h.path);
        let sys = |op: &'static str| {
            let entry = entry.clone();
            move |errno: Errno| UnpackError::Sys { entry: entry.clone(), op, errno }
        };
        match meaning {
            Meaning::Ignored => return Ok(()),
            Meaning::Opaque => {
                let dir_comps = &comps[..comps.len() - 1];
                self.make_opaque(dir_comps).map_err(sys("marking the directory opaque"))?;
                self.report.opaque_dirs += 1;
                return Ok(());
            }
            Meaning::Whiteout(name) => {
                let parent = self.parent(&comps, &entry)?;
                let r = self.whiteout(parent.as_fd(), &cname(&name));
                self.cache = Some((comps[..comps.len() - 1].to_vec(), parent));
                r.map_err(sys("creating the whiteout"))?;
                self.report.whiteouts += 1;
                return Ok(());
            }
            Meaning::Content => {}
        }
        if comps.is_empty() {
            // The layer root itself: only a directory may describe it. A
            // symlink or file named "." or "/" would replace the root the
            // overlay is built from (CVE-2021-29136 shape).
            if h.kind != Kind::Dir {
                return Err(UnpackError::Refused {
                    entry,
                    why: "a non-directory entry may not replace the layer root".into(),
                });
            }
            let ids = self.ids(h.uid, h.gid);
            let xattrs = self.xattrs(h);
            self.dirs.push(DirMeta { comps, mode: h.mode, created: None, ids, mtime: Some(h.mtime), xattrs });
            self.report.dirs += 1;
            return Ok(());
        }
        match h.kind {
            Kind::Char | Kind::Block | Kind::Fifo => {
                self.report.skipped_count += 1;
                if self.report.skipped.len() < MAX_SKIPPED_SHOWN {
                    self.report.skipped.push(entry);
                }
                return Ok(());
            }
            Kind::File if h.size > self.max_file => {
                return Err(UnpackError::Bound { what: "a file's declared size", limit: self.max_file });
            }
            _ => {}
        }
        let parent = self.parent(&comps, &entry)?;
        let name = cname(comps.last().expect("non-empty"));
        let r = self.create(parent.as_fd(), &name, h, &comps, data, &entry);
        self.cache = Some((comps[..comps.len() - 1].to_vec(), parent));
        r
    }

    fn create(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &CStr,
        h: &Header,
        comps: &[Vec<u8>],
        data: &mut dyn Read,
        entry: &str,
    ) -> Result<(), UnpackError> {
        let sys = |op: &'static str| move |errno: Errno| UnpackError::Sys { entry: entry.to_string(), op, errno };
        let ids = self.ids(h.uid, h.gid);
        match h.kind {
            Kind::Dir => {
                // Final permissions right away when they leave the owner
                // rwx (needed while children are created), else 0700 now
                // and the real mode at the end.
                let exact = self.umask == Some(0) && h.mode & 0o7700 == 0o700;
                let first = if exact { h.mode & 0o777 } else { 0o700 };
                let mut created = exact.then_some(first);
                let opaque = match mkdirat(parent, name, Mode::from_bits_truncate(first)) {
                    Ok(()) => false,
                    Err(Errno::EEXIST) => {
                        let st = lstat_at(parent, name).map_err(sys("stat"))?;
                        if file_type(&st) == SFlag::S_IFDIR {
                            created = None;
                            false
                        } else {
                            let was_whiteout = self.clear(parent, name).map_err(sys("replacing"))?;
                            mkdirat(parent, name, Mode::from_bits_truncate(first)).map_err(sys("mkdir"))?;
                            was_whiteout
                        }
                    }
                    Err(e) => return Err(sys("mkdir")(e)),
                };
                if opaque {
                    self.make_opaque(comps).map_err(sys("marking the directory opaque"))?;
                }
                let xattrs = self.xattrs(h);
                self.dirs.push(DirMeta {
                    comps: comps.to_vec(),
                    mode: h.mode,
                    created,
                    ids,
                    mtime: Some(h.mtime),
                    xattrs,
                });
                self.report.dirs += 1;
            }
            Kind::File => {
                let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                // Writing through this fd works whatever the mode says.
                let mode = Mode::from_bits_truncate(h.mode & 0o777);
                let fd = match openat(parent, name, flags, mode) {
                    Err(Errno::EEXIST) => {
                        self.clear(parent, name).map_err(sys("replacing"))?;
                        openat(parent, name, flags, mode).map_err(sys("create"))?
                    }
                    other => other.map_err(sys("create"))?,
                };
                let mut file = std::fs::File::from(fd);
                let mut hash = FileHasher::new();
                let mut left = h.size;
                while left > 0 {
                    let want = self.buf.len().min(left as usize);
                    let n = data.read(&mut self.buf[..want])?;
                    if n == 0 {
                        return Err(UnpackError::Io(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "truncated file data",
                        )));
                    }
                    file.write_all(&self.buf[..n]).map_err(|e| UnpackError::Sys {
                        entry: entry.to_string(),
                        op: "write",
                        errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                    })?;
                    hash.update(&self.buf[..n]);
                    left -= n as u64;
                }
                let ino = nix::sys::stat::fstat(&file).map_err(sys("stat"))?.st_ino;
                self.written.insert(ino, hash.finish());
                self.report.bytes += h.size;
                self.report.files += 1;
                let fd = OwnedFd::from(file);
                // chown before chmod: chown clears setuid/setgid bits.
                if let Some((u, g)) = ids {
                    fchown(&fd, Some(Uid::from_raw(u)), Some(Gid::from_raw(g))).map_err(sys("chown"))?;
                }
                if h.mode & 0o7000 != 0 || self.umask.is_none_or(|m| h.mode & m != 0) {
                    fchmod(&fd, Mode::from_bits_truncate(h.mode)).map_err(sys("chmod"))?;
                }
                for (k, v) in self.xattrs(h) {
                    crate::sys::xattr::fset(fd.as_fd(), &cname(&k), &v).map_err(sys("setxattr"))?;
                }
                let t = TimeSpec::new(h.mtime, 0);
                futimens(&fd, &t, &t).map_err(sys("set times"))?;
            }
            Kind::Symlink => {
                if h.link.is_empty() || h.link.len() >= libc::PATH_MAX as usize || h.link.contains(&0) {
                    return Err(UnpackError::Refused {
                        entry: entry.to_string(),
                        why: format!("symlink target of {} bytes is empty, too long or has NUL", h.link.len()),
                    });
                }
                let target = cname(&h.link);
                match nix::unistd::symlinkat(target.as_c_str(), parent, name) {
                    Err(Errno::EEXIST) => {
                        self.clear(parent, name).map_err(sys("replacing"))?;
                        nix::unistd::symlinkat(target.as_c_str(), parent, name).map_err(sys("symlink"))?;
                    }
                    other => other.map_err(sys("symlink"))?,
                }
                if let Some((u, g)) = ids {
                    fchownat(
                        parent,
                        name,
                        Some(Uid::from_raw(u)),
                        Some(Gid::from_raw(g)),
                        AtFlags::AT_SYMLINK_NOFOLLOW,
                    )
                    .map_err(sys("chown"))?;
                }
                let t = TimeSpec::new(h.mtime, 0);
                utimensat(parent, name, &t, &t, UtimensatFlags::NoFollowSymlink).map_err(sys("set times"))?;
                self.report.symlinks += 1;
            }
            Kind::Hardlink => self.hardlink(parent, name, h, comps, entry)?,
            Kind::Char | Kind::Block | Kind::Fifo => unreachable!("skipped by the caller"),
        }
        Ok(())
    }

    fn hardlink(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &CStr,
        h: &Header,
        comps: &[Vec<u8>],
        entry: &str,
    ) -> Result<(), UnpackError> {
        let limits = super::whiteout::NameLimits { max_path: libc::PATH_MAX as usize, max_depth: usize::MAX };
        let refused = |why: String| UnpackError::Refused { entry: entry.to_string(), why };
        // The same rules as entry paths: no absolute target, no `..`, so
        // `/etc/shadow` or `../../etc/shadow` never name a host file.
        let target = super::whiteout::components(&h.link, &limits)
            .map_err(|e| refused(format!("hardlink target {:?}: {e}", display(&h.link))))?;
        if target.is_empty() {
            return Err(refused("hardlink to the layer root".into()));
        }
        if target == comps {
            return Ok(());
        }
        let not_here = || refused(format!("hardlink target {:?} is not a file of this layer", display(&h.link)));
        let tparent =
            open_dir_path(self.root.as_fd(), join(&target[..target.len() - 1]).as_c_str()).map_err(|_| not_here())?;
        let tname = cname(target.last().expect("non-empty"));
        let st = lstat_at(tparent.as_fd(), &tname).map_err(|_| not_here())?;
        if file_type(&st) == SFlag::S_IFDIR {
            return Err(refused("hardlink to a directory".into()));
        }
        let link = || nix::unistd::linkat(tparent.as_fd(), tname.as_c_str(), parent, name, AtFlags::empty());
        let sys = |errno| UnpackError::Sys { entry: entry.to_string(), op: "link", errno };
        match link() {
            Err(Errno::EEXIST) => {
                self.clear(parent, name).map_err(sys)?;
                link().map_err(sys)?;
            }
            other => other.map_err(sys)?,
        }
        self.report.hardlinks += 1;
        Ok(())
    }

    /// Opens the parent directory of `comps` (creating missing ones, as tar
    /// does), reusing the cached one when the entry is its sibling.
    fn parent(&mut self, comps: &[Vec<u8>], entry: &str) -> Result<OwnedFd, UnpackError> {
        let want = &comps[..comps.len().saturating_sub(1)];
        if let Some((c, fd)) = self.cache.take()
            && c == want
        {
            return Ok(fd);
        }
        match open_dir_path(self.root.as_fd(), join(want).as_c_str()) {
            Ok(fd) => return Ok(fd),
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(self.parent_error(want, entry, e)),
        }
        // Walk, creating what is missing (implicit directories: root-owned,
        // 0755, like `mkdir -p` under tar).
        let mut cur = open_dir_path(self.root.as_fd(), "").map_err(|e| self.parent_error(&[], entry, e))?;
        for i in 0..want.len() {
            let name = cname(&want[i]);
            match mkdirat(cur.as_fd(), name.as_c_str(), Mode::from_bits_truncate(0o700)) {
                Ok(()) => {
                    let ids = self.ids(0, 0);
                    self.dirs.push(DirMeta {
                        comps: want[..=i].to_vec(),
                        mode: 0o755,
                        created: None,
                        ids,
                        mtime: None,
                        xattrs: vec![],
                    });
                }
                Err(Errno::EEXIST) => {
                    let st = lstat_at(cur.as_fd(), &name).map_err(|e| self.parent_error(&want[..=i], entry, e))?;
                    if is_whiteout(&st) {
                        // A directory where this layer whited out the name:
                        // it must stay opaque to keep hiding lower content.
                        nix::unistd::unlinkat(cur.as_fd(), name.as_c_str(), nix::unistd::UnlinkatFlags::NoRemoveDir)
                            .map_err(|e| self.parent_error(&want[..=i], entry, e))?;
                        mkdirat(cur.as_fd(), name.as_c_str(), Mode::from_bits_truncate(0o700))
                            .map_err(|e| self.parent_error(&want[..=i], entry, e))?;
                        self.make_opaque(&want[..=i]).map_err(|e| self.parent_error(&want[..=i], entry, e))?;
                        let ids = self.ids(0, 0);
                        self.dirs.push(DirMeta {
                            comps: want[..=i].to_vec(),
                            mode: 0o755,
                            created: None,
                            ids,
                            mtime: None,
                            xattrs: vec![],
                        });
                    }
                }
                Err(e) => return Err(self.parent_error(&want[..=i], entry, e)),
            }
            cur = open_dir_path(cur.as_fd(), name.as_c_str()).map_err(|e| self.parent_error(&want[..=i], entry, e))?;
        }
        Ok(cur)
    }

    fn parent_error(&self, at: &[Vec<u8>], entry: &str, errno: Errno) -> UnpackError {
        let p = display(&at.join(&b'/'));
        // openat2 reports a symlink as the last component as ENOTDIR (it
        // opens the link itself under O_NOFOLLOW): look at what it is.
        let errno = match (errno, at.split_last()) {
            (Errno::ENOTDIR, Some((last, up))) => match open_dir_path(self.root.as_fd(), join(up).as_c_str())
                .and_then(|d| lstat_at(d.as_fd(), &cname(last)))
            {
                Ok(st) if file_type(&st) == SFlag::S_IFLNK => Errno::ELOOP,
                _ => errno,
            },
            _ => errno,
        };
        let why = match errno {
            Errno::ELOOP => format!("parent {p:?} is a symlink; refusing to write through it"),
            Errno::ENOTDIR => format!("parent {p:?} is not a directory"),
            Errno::EXDEV => format!("parent {p:?} leaves the layer"),
            e => return UnpackError::Sys { entry: entry.to_string(), op: "opening the parent directory", errno: e },
        };
        UnpackError::Refused { entry: entry.to_string(), why }
    }

    /// Removes an existing non-directory-or-directory at `name` so an entry
    /// can replace it (tar semantics: the later entry wins). Returns
    /// whether it was a whiteout.
    fn clear(&mut self, parent: BorrowedFd<'_>, name: &CStr) -> Result<bool, Errno> {
        let st = lstat_at(parent, name)?;
        let whiteout = is_whiteout(&st);
        if file_type(&st) == SFlag::S_IFDIR {
            // Cached parents below it would point into the removed tree.
            self.cache = None;
        }
        fsutil::remove_tree(parent, name)?;
        Ok(whiteout)
    }

    fn whiteout(&mut self, parent: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
        match lstat_at(parent, name) {
            Ok(st) if file_type(&st) == SFlag::S_IFDIR => {
                // This layer has the directory too: hide only lower content.
                let d = open_beneath(parent, name, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
                crate::sys::xattr::fset(d.as_fd(), OPAQUE_XATTR, b"y")
            }
            // This layer's own entry already hides the lower one.
            Ok(_) => Ok(()),
            Err(Errno::ENOENT) => {
                mknodat(parent, name, SFlag::S_IFCHR, Mode::empty(), 0)?;
                if let Some((u, g)) = self.ids(0, 0) {
                    fchownat(
                        parent,
                        name,
                        Some(Uid::from_raw(u)),
                        Some(Gid::from_raw(g)),
                        AtFlags::AT_SYMLINK_NOFOLLOW,
                    )?;
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn make_opaque(&mut self, dir: &[Vec<u8>]) -> Result<(), Errno> {
        if !dir.is_empty() {
            // Create it (and parents) if the marker comes first.
            let mut probe = dir.to_vec();
            probe.push(b"x".to_vec());
            let p = self.parent(&probe, "").map_err(|_| Errno::ENOTDIR)?;
            self.cache = Some((dir.to_vec(), p));
        }
        let d = open_beneath(self.root.as_fd(), join(dir).as_c_str(), OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
        crate::sys::xattr::fset(d.as_fd(), OPAQUE_XATTR, b"y")
    }

    /// The entry's xattrs that survive: `user.*` except overlay's own
    /// (an image must not forge opaque/redirect metadata). File
    /// capabilities and everything else are dropped and counted.
    fn xattrs(&mut self, h: &Header) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut keep = Vec::new();
        for (k, v) in &h.xattrs {
            if k == b"security.capability" {
                self.report.capabilities_dropped += 1;
            } else if k.starts_with(b"user.")
                && !k.starts_with(b"user.overlay.")
                && !k.contains(&0)
                && k.len() <= 255
                && v.len() <= MAX_XATTR_VALUE
            {
                keep.push((k.clone(), v.clone()));
            } else {
                self.report.xattrs_dropped += 1;
            }
        }
        keep
    }

    /// Applies directory metadata, deepest first (so a read-only directory
    /// stays writable until its children are done), then records the
    /// layer's file manifest and returns it with the report.
    pub fn finish(mut self) -> Result<Unpacked, UnpackError> {
        self.cache = None;
        let mut dirs = std::mem::take(&mut self.dirs);
        dirs.sort_by_key(|d| std::cmp::Reverse(d.comps.len()));
        for d in dirs {
            let entry = display(&d.comps.join(&b'/'));
            let sys = |op: &'static str| {
                let entry = entry.clone();
                move |errno: Errno| UnpackError::Sys { entry, op, errno }
            };
            let fd = match open_beneath(
                self.root.as_fd(),
                join(&d.comps).as_c_str(),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            ) {
                // Replaced by a later entry (maybe a symlink): nothing to do.
                Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => continue,
                other => other.map_err(sys("opening"))?,
            };
            if let Some((u, g)) = d.ids {
                fchown(&fd, Some(Uid::from_raw(u)), Some(Gid::from_raw(g))).map_err(sys("chown"))?;
            }
            for (k, v) in &d.xattrs {
                crate::sys::xattr::fset(fd.as_fd(), &cname(k), v).map_err(sys("setxattr"))?;
            }
            if d.created != Some(d.mode) {
                fchmod(&fd, Mode::from_bits_truncate(d.mode)).map_err(sys("chmod"))?;
            }
            if let Some(m) = d.mtime {
                let t = TimeSpec::new(m, 0);
                futimens(&fd, &t, &t).map_err(sys("set times"))?;
            }
        }
        let files = manifest::scan(self.root.as_fd(), &Hashing::Written(&self.written))?;
        Ok(Unpacked { report: self.report, files })
    }
}
