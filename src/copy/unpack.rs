//! tar -> a tree under one directory fd. The stream is hostile (a sandbox
//! made it, or a user piped it in), so:
//! - names are refused when absolute or holding `..` (`entry_components`);
//! - parents are opened one component at a time with openat2(RESOLVE_BENEATH
//!   | RESOLVE_NO_SYMLINKS): an entry below a symlink (one an earlier entry
//!   planted, or one already there) is refused with ELOOP, never followed;
//! - an existing non-directory is unlinked and the new entry created
//!   O_CREAT | O_EXCL | O_NOFOLLOW: nothing is ever written *through* a
//!   symlink (a sandbox-made `x -> /etc/passwd` is replaced, not followed);
//! - bytes and entries are counted against `Limits` from the headers,
//!   before any data is written, so a refused file leaves nothing behind;
//! - ownership is the writer's, set-id bits are dropped, device nodes and
//!   FIFOs are skipped (reported).
//!
//! Directories are made 0700 and given their own mode at the end, so a
//! read-only directory in the stream can still be filled.

use super::{CopyError, Limits, Report, entry_components};
use crate::image::tar::{Header, Kind, Stream, TarReader};
use crate::sys::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::sys::stat::{Mode, SFlag, fchmod, fstatat, futimens, mkdirat};
use nix::sys::time::TimeSpec;
use nix::unistd::{LinkatFlags, UnlinkatFlags, linkat, symlinkat, unlinkat};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Where a stream is unpacked.
pub struct Target {
    /// The directory entries are written under.
    pub dir: OwnedFd,
    /// The copy's new name: the first component of every entry is replaced
    /// by it (and the stream must then hold one tree).
    pub rename_top: Option<Vec<u8>>,
    /// The directory as the user named it (for messages).
    pub shown: String,
}

/// How `open_target` resolves the destination a user named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolve {
    /// Inside a sandbox (from its root's fd): symlinks followed within the
    /// root only, `..` never above it, no /proc magic links.
    InRoot,
    /// On the host: the caller's own path, resolved as the caller's tools
    /// would.
    Host,
    /// Inside a sandbox whose root is the caller's own root (husk's copier
    /// inside gVisor, whose kernel has no openat2): the kernel's own path
    /// walk from `/`, which never leaves the process's root (`..` stops
    /// there, absolute symlinks restart there). Nothing of the host is in
    /// that view; only RESOLVE_NO_MAGICLINKS is not had, and a /proc link
    /// there names the sandbox's own files.
    OwnRoot,
}

/// What the stream is: one tree to name after the destination (`cp SRC
/// DST`), or entries to put inside an existing directory (`cp - DST`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Tree,
    Entries,
}

pub fn open_dir(start: BorrowedFd<'_>, path: &str, resolve: Resolve) -> Result<OwnedFd, Errno> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    match resolve {
        Resolve::InRoot => {
            let how =
                OpenHow::new().flags(flags).resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
            openat2(start, path, how)
        }
        Resolve::Host | Resolve::OwnRoot => openat(start, path, flags, Mode::empty()),
    }
}

/// The destination `path` as `cp` reads it: an existing directory receives
/// the tree under its own name; otherwise the tree takes the name of
/// `path`'s last component, inside its parent (which must exist).
pub fn open_target(start: BorrowedFd<'_>, path: &str, resolve: Resolve, shape: Shape) -> Result<Target, CopyError> {
    match open_dir(start, path, resolve) {
        Ok(dir) => return Ok(Target { dir, rename_top: None, shown: path.to_string() }),
        Err(Errno::ENOENT | Errno::ENOTDIR) if shape == Shape::Tree && !path.ends_with('/') => {}
        Err(Errno::ENOTDIR) => return Err(CopyError::NotDir { path: path.to_string() }),
        Err(e) => return Err(CopyError::fs(path, e)),
    }
    let Some((parent, base)) = super::split_path(path) else {
        return Err(CopyError::NotDir { path: path.to_string() });
    };
    let dir = open_dir(start, parent, resolve).map_err(|e| match e {
        Errno::ENOTDIR => CopyError::NotDir { path: parent.to_string() },
        e => CopyError::fs(parent, e),
    })?;
    Ok(Target { dir, rename_top: Some(base.as_bytes().to_vec()), shown: parent.to_string() })
}

pub struct Unpacker {
    target: Target,
    limits: Limits,
    report: Report,
    top: Option<Vec<u8>>,
    /// Directories made or met, and the mode each gets at the end.
    dirs: Vec<(Vec<Vec<u8>>, u32)>,
}

/// Permission bits kept: set-user/group-id are dropped (a sandbox-made
/// setuid file must not become one on the host, nor a stream's in a sandbox).
const MODE_MASK: u32 = 0o1777;

impl Unpacker {
    pub fn new(target: Target, limits: Limits) -> Self {
        Unpacker { target, limits, report: Report::default(), top: None, dirs: Vec::new() }
    }

    /// Reads the whole stream (to its end-of-archive marker) and unpacks it.
    /// A copy to a new name that fails (a bound, a refused entry, a broken
    /// stream) removes what it made: it leaves nothing, or the whole tree.
    pub fn run<R: Read>(mut self, input: R) -> Result<Report, CopyError> {
        let new_top = self.target.rename_top.as_deref().map(cname).filter(|n| {
            matches!(fstatat(&self.target.dir, n.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW), Err(Errno::ENOENT))
        });
        let result = self.unpack(input);
        if result.is_err()
            && let Some(name) = new_top
            && let Ok(dir) = nix::unistd::dup(&self.target.dir)
        {
            let _ = crate::image::fsutil::remove_tree(dir.as_fd(), &name);
        }
        result
    }

    fn unpack<R: Read>(&mut self, input: R) -> Result<Report, CopyError> {
        let mut tar = TarReader::new(Stream(input));
        while let Some(h) = tar.next_member().map_err(|e| CopyError::Tar(e.to_string()))? {
            self.member(&h, &mut tar)?;
        }
        if !tar.saw_end_marker() {
            return Err(CopyError::Truncated);
        }
        if self.report.entries == 0 {
            return Err(CopyError::Empty);
        }
        self.finish_dirs()?;
        Ok(std::mem::take(&mut self.report))
    }

    fn shown(&self, comps: &[Vec<u8>]) -> String {
        let rel = String::from_utf8_lossy(&comps.join(&b'/')).into_owned();
        format!("{}/{rel}", self.target.shown.trim_end_matches('/'))
    }

    fn name_of(&mut self, raw: &[u8], kind: Kind) -> Result<Option<Vec<Vec<u8>>>, CopyError> {
        // `tar -C dir -c .` starts with "./": the target directory itself.
        if kind == Kind::Dir && raw.split(|b| *b == b'/').all(|c| c.is_empty() || c == b".") && !raw.is_empty() {
            return Ok(None);
        }
        let mut comps = entry_components(raw)?;
        if let Some(new) = &self.target.rename_top {
            match &self.top {
                None => self.top = Some(comps[0].clone()),
                Some(t) if *t == comps[0] => {}
                Some(t) => {
                    return Err(CopyError::OutsideTree {
                        name: String::from_utf8_lossy(raw).into_owned(),
                        top: String::from_utf8_lossy(t).into_owned(),
                    });
                }
            }
            comps[0] = new.clone();
        }
        Ok(Some(comps))
    }

    fn member<R: Read>(&mut self, h: &Header, tar: &mut TarReader<Stream<R>>) -> Result<(), CopyError> {
        let Some(comps) = self.name_of(&h.path, h.kind)? else { return Ok(()) };
        let size = if h.kind == Kind::File { h.size } else { 0 };
        let shown = self.shown(&comps);
        if matches!(h.kind, Kind::Char | Kind::Block | Kind::Fifo) {
            self.report.skip(shown);
            return Ok(());
        }
        self.report.count(&self.limits, size, &shown)?;
        let (last, parents) = comps.split_last().expect("entry_components is never empty");
        let parent = self.parent(parents)?;
        let name = cname(last);
        let fs = |e| CopyError::fs(shown.clone(), e);
        match h.kind {
            Kind::Dir => {
                match fstatat(&parent, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                    Ok(st) if is_dir(st.st_mode) => {}
                    Ok(_) => {
                        unlinkat(&parent, name.as_c_str(), UnlinkatFlags::NoRemoveDir).map_err(fs)?;
                        mkdirat(&parent, name.as_c_str(), Mode::from_bits_truncate(0o700)).map_err(fs)?;
                    }
                    Err(Errno::ENOENT) => {
                        mkdirat(&parent, name.as_c_str(), Mode::from_bits_truncate(0o700)).map_err(fs)?
                    }
                    Err(e) => return Err(fs(e)),
                }
                self.report.dirs += 1;
                self.dirs.push((comps.clone(), h.mode & MODE_MASK));
            }
            Kind::File => {
                self.clear(&parent, &name, &shown, "file")?;
                let fd = openat(
                    &parent,
                    name.as_c_str(),
                    OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(0o600),
                )
                .map_err(fs)?;
                let mut f = std::fs::File::from(fd);
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = tar.read_data(&mut buf).map_err(|e| CopyError::Tar(e.to_string()))?;
                    if n == 0 {
                        break;
                    }
                    f.write_all(&buf[..n]).map_err(|e| fs(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))))?;
                }
                fchmod(&f, Mode::from_bits_truncate(h.mode & MODE_MASK)).map_err(fs)?;
                let t = TimeSpec::new(h.mtime, 0);
                let _ = futimens(&f, &t, &t);
                self.report.files += 1;
            }
            Kind::Symlink => {
                self.clear(&parent, &name, &shown, "symlink")?;
                symlinkat(h.link.as_slice(), &parent, name.as_c_str()).map_err(fs)?;
                self.report.symlinks += 1;
            }
            Kind::Hardlink => {
                let Some(to) = self.name_of(&h.link, Kind::File)? else { return Ok(()) };
                let (tlast, tparents) = to.split_last().expect("entry_components is never empty");
                let tparent = self.parent(tparents)?;
                self.clear(&parent, &name, &shown, "hard link")?;
                linkat(&tparent, cname(tlast).as_c_str(), &parent, name.as_c_str(), LinkatFlags::empty())
                    .map_err(fs)?;
                self.report.files += 1;
            }
            Kind::Char | Kind::Block | Kind::Fifo => unreachable!("skipped above"),
        }
        Ok(())
    }

    /// Makes room for a non-directory: an existing one is unlinked (never
    /// opened: it may be a symlink to anywhere), a directory is an error.
    fn clear(&self, parent: &OwnedFd, name: &CString, shown: &str, what: &str) -> Result<(), CopyError> {
        match fstatat(parent, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(CopyError::fs(shown, e)),
            Ok(st) if is_dir(st.st_mode) => {
                Err(CopyError::ReplacesDir { path: shown.to_string(), what: what.to_string() })
            }
            Ok(_) => unlinkat(parent, name.as_c_str(), UnlinkatFlags::NoRemoveDir).map_err(|e| CopyError::fs(shown, e)),
        }
    }

    /// The directory `comps` names below the target, made (0700) where
    /// missing; a symlink on the way is ELOOP.
    fn parent(&self, comps: &[Vec<u8>]) -> Result<OwnedFd, CopyError> {
        let mut cur = nix::unistd::dup(&self.target.dir).map_err(|e| CopyError::fs(&self.target.shown, e))?;
        for (i, c) in comps.iter().enumerate() {
            let name = cname(c);
            let fs = |e| CopyError::fs(self.shown(&comps[..=i]), e);
            let next = match open_below(cur.as_fd(), &name) {
                Err(Errno::ENOENT) => {
                    mkdirat(&cur, name.as_c_str(), Mode::from_bits_truncate(0o755)).map_err(fs)?;
                    open_below(cur.as_fd(), &name)
                }
                other => other,
            };
            cur = next.map_err(|e| match e {
                // openat2 says ENOTDIR (or ELOOP) for a symlink on the way.
                Errno::ENOTDIR | Errno::ELOOP if is_symlink(cur.as_fd(), &name) => {
                    CopyError::Symlink { path: self.shown(&comps[..=i]) }
                }
                e => fs(e),
            })?;
        }
        Ok(cur)
    }

    fn finish_dirs(&mut self) -> Result<(), CopyError> {
        let dirs = std::mem::take(&mut self.dirs);
        for (comps, mode) in dirs.iter().rev() {
            let Some((last, parents)) = comps.split_last() else { continue };
            let parent = self.parent(parents)?;
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let fd = open_one(parent.as_fd(), &cname(last), flags).map_err(|e| CopyError::fs(self.shown(comps), e))?;
            fchmod(&fd, Mode::from_bits_truncate(*mode)).map_err(|e| CopyError::fs(self.shown(comps), e))?;
        }
        Ok(())
    }
}

fn beneath() -> ResolveFlag {
    ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS
}

fn open_below(dir: BorrowedFd<'_>, name: &CString) -> Result<OwnedFd, Errno> {
    open_one(dir, name, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
}

/// The directory `name` (one component) below `dir`, never through a
/// symlink: openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS). A kernel
/// without openat2 (gVisor 2022-12, where husk's copier runs inside the
/// sandbox) gets the same from openat(O_NOFOLLOW) of a name that is one
/// plain component (no `/`, not `.` or `..`: it cannot leave `dir`), the
/// result checked to be a directory on its fd (O_PATH | O_NOFOLLOW opens a
/// symlink itself rather than failing).
fn open_one(dir: BorrowedFd<'_>, name: &CString, flags: OFlag) -> Result<OwnedFd, Errno> {
    match openat2(dir, name.as_c_str(), OpenHow::new().flags(flags).resolve(beneath())) {
        Err(Errno::ENOSYS) => {}
        other => return other,
    }
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.contains(&b'/') || bytes == b"." || bytes == b".." {
        return Err(Errno::EINVAL);
    }
    let fd = openat(dir, name.as_c_str(), flags | OFlag::O_NOFOLLOW, Mode::empty())?;
    let st = nix::sys::stat::fstat(&fd)?;
    if !is_dir(st.st_mode) {
        return Err(if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK {
            Errno::ELOOP
        } else {
            Errno::ENOTDIR
        });
    }
    Ok(fd)
}

fn cname(c: &[u8]) -> CString {
    CString::new(c).expect("tar names hold no NUL")
}

fn is_symlink(dir: BorrowedFd<'_>, name: &CString) -> bool {
    fstatat(dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK)
}

fn is_dir(mode: u32) -> bool {
    SFlag::from_bits_truncate(mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}
