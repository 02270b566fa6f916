//! fd-relative filesystem helpers for trees whose content is hostile (a
//! layer being unpacked, a published layer being removed): nothing here
//! ever follows a symlink, and every lookup stays beneath its starting fd.

use crate::sys::Errno;
use nix::NixPath;
use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat};
use nix::unistd::UnlinkatFlags;
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// Resolution that never follows a symlink and never leaves the start fd.
pub fn beneath() -> ResolveFlag {
    ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_XDEV
}

/// Opens `path` (relative, "" for `dir` itself) below `dir` with `flags`,
/// refusing any symlink on the way (ELOOP) or at the end.
pub fn open_beneath<P: ?Sized + NixPath>(dir: BorrowedFd<'_>, path: &P, flags: OFlag) -> Result<OwnedFd, Errno> {
    let how = OpenHow::new().flags(flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW).resolve(beneath());
    if path.is_empty() { openat2(dir, c".", how) } else { openat2(dir, path, how) }
}

/// O_PATH handle of a directory below `dir`.
pub fn open_dir_path<P: ?Sized + NixPath>(dir: BorrowedFd<'_>, path: &P) -> Result<OwnedFd, Errno> {
    open_beneath(dir, path, OFlag::O_PATH | OFlag::O_DIRECTORY)
}

/// lstat of `name` in `dir`.
pub fn lstat_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<FileStat, Errno> {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
}

pub fn file_type(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// An overlay whiteout: a character device with device number 0:0.
pub fn is_whiteout(st: &FileStat) -> bool {
    file_type(st) == SFlag::S_IFCHR && st.st_rdev == 0
}

/// Joins components into a relative C path.
pub fn join(comps: &[Vec<u8>]) -> CString {
    CString::new(comps.join(&b'/')).expect("validated components contain no NUL")
}

/// chmod through the fd's /proc magic link: the exact inode, never a
/// path that content could have swapped for a symlink.
pub fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    let p = format!("/proc/self/fd/{}", fd.as_raw_fd());
    nix::sys::stat::fchmodat(
        nix::fcntl::AT_FDCWD,
        p.as_str(),
        Mode::from_bits_truncate(mode),
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
}

/// Removes `name` in `parent`, recursively if it is a directory, making
/// directories searchable first (a layer may hold 0000 directories, which
/// their rootless owner cannot otherwise empty). Symlinks are removed,
/// never followed.
pub fn remove_tree(parent: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    let st = match lstat_at(parent, name) {
        Err(Errno::ENOENT) => return Ok(()),
        other => other?,
    };
    if file_type(&st) != SFlag::S_IFDIR {
        return nix::unistd::unlinkat(parent, name, UnlinkatFlags::NoRemoveDir);
    }
    let handle = open_beneath(parent, name, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
    if st.st_mode & 0o700 != 0o700 {
        chmod_fd(handle.as_fd(), 0o700)?;
    }
    let dir = open_beneath(handle.as_fd(), "", OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
    empty_dir(dir)?;
    nix::unistd::unlinkat(parent, name, UnlinkatFlags::RemoveDir)
}

fn empty_dir(dir: OwnedFd) -> Result<(), Errno> {
    let fd = dir.try_clone().map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    let mut names: Vec<(CString, Option<Type>)> = Vec::new();
    let mut d = Dir::from_fd(fd)?;
    for e in d.iter() {
        let e = e?;
        let n = e.file_name();
        if n == c"." || n == c".." {
            continue;
        }
        names.push((n.to_owned(), e.file_type()));
    }
    drop(d);
    for (n, t) in names {
        match t {
            Some(Type::Directory) | None => remove_tree(dir.as_fd(), &n)?,
            _ => match nix::unistd::unlinkat(dir.as_fd(), n.as_c_str(), UnlinkatFlags::NoRemoveDir) {
                Err(Errno::EISDIR) => remove_tree(dir.as_fd(), &n)?,
                other => other?,
            },
        }
    }
    Ok(())
}

/// A path's final component as a C string (no NUL inside by validation).
pub fn cname(bytes: &[u8]) -> CString {
    CString::new(bytes).expect("validated component contains no NUL")
}

/// Lossy display of an OS name.
pub fn show(name: &OsStr) -> String {
    String::from_utf8_lossy(name.as_bytes()).into_owned()
}
