//! A tree -> tar, walked fd by fd from the directory that holds its top:
//! every entry is looked at with fstatat(AT_SYMLINK_NOFOLLOW) and opened
//! O_NOFOLLOW relative to its parent's fd, so a symlink (even one swapped
//! in while the walk runs) is archived as a symlink and never entered.
//! Regular files are opened O_NONBLOCK and checked with fstat, so a FIFO
//! swapped in for a file cannot block the walk.

use super::tarw::{Entry, EntryKind, TarWriter};
use super::{CopyError, Limits, Report};
use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};
use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// Deeper trees are refused (each level holds a directory fd).
pub const MAX_DEPTH: usize = 256;

pub struct Packer<'a, W: Write> {
    pub out: TarWriter<W>,
    pub limits: Limits,
    pub report: Report,
    /// How paths are shown in errors (the tree's place for the user).
    pub shown_root: &'a str,
}

impl<W: Write> Packer<'_, W> {
    /// Archives `name` in `parent` (not followed if a symlink) as `tar_name`.
    pub fn add(&mut self, parent: BorrowedFd<'_>, name: &CStr, tar_name: &[u8]) -> Result<(), CopyError> {
        self.walk(parent, name, tar_name, 0)
    }

    pub fn finish(self) -> Result<(W, Report), CopyError> {
        let out = self.out.finish().map_err(CopyError::io)?;
        Ok((out, self.report))
    }

    fn shown(&self, tar_name: &[u8]) -> String {
        let rel = String::from_utf8_lossy(tar_name);
        format!("{}/{rel}", self.shown_root.trim_end_matches('/'))
    }

    fn walk(&mut self, parent: BorrowedFd<'_>, name: &CStr, tar_name: &[u8], depth: usize) -> Result<(), CopyError> {
        let shown = self.shown(tar_name);
        let fs = |e| CopyError::fs(shown.clone(), e);
        let st = fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(fs)?;
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => {
                if depth >= MAX_DEPTH {
                    return Err(CopyError::Stream(format!(
                        "{} is more than {MAX_DEPTH} directories deep",
                        self.shown(tar_name)
                    )));
                }
                let fd = openat(
                    parent,
                    name,
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(fs)?;
                let st = fstat(&fd).map_err(fs)?;
                self.report.count(&self.limits, 0, &self.shown(tar_name))?;
                self.report.dirs += 1;
                self.entry(tar_name, EntryKind::Dir, &st, 0, b"")?;
                let mut names = children(&fd).map_err(fs)?;
                names.sort();
                for child in names {
                    let mut sub = tar_name.to_vec();
                    sub.push(b'/');
                    sub.extend_from_slice(child.as_bytes());
                    self.walk(fd.as_fd(), &child, &sub, depth + 1)?;
                }
                Ok(())
            }
            SFlag::S_IFREG => {
                let fd = openat(
                    parent,
                    name,
                    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(fs)?;
                let st = fstat(&fd).map_err(fs)?;
                if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
                    self.report.skip(self.shown(tar_name));
                    return Ok(());
                }
                let size = st.st_size.max(0) as u64;
                self.report.count(&self.limits, size, &self.shown(tar_name))?;
                self.report.files += 1;
                self.entry(tar_name, EntryKind::File, &st, size, b"")?;
                self.file_data(fd, size, tar_name)
            }
            SFlag::S_IFLNK => {
                let target = readlinkat(parent, name).map_err(fs)?;
                self.report.count(&self.limits, 0, &self.shown(tar_name))?;
                self.report.symlinks += 1;
                self.entry(tar_name, EntryKind::Symlink, &st, 0, target.as_bytes())
            }
            _ => {
                self.report.skip(self.shown(tar_name));
                Ok(())
            }
        }
    }

    fn entry(&mut self, name: &[u8], kind: EntryKind, st: &FileStat, size: u64, link: &[u8]) -> Result<(), CopyError> {
        let e = Entry {
            name,
            kind,
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            size,
            mtime: st.st_mtime,
            link,
        };
        self.out.header(&e).map_err(CopyError::io)
    }

    /// Exactly `size` bytes (the header's): a file that shrank while it was
    /// read is an error, one that grew is cut at its size.
    fn file_data(&mut self, fd: OwnedFd, size: u64, tar_name: &[u8]) -> Result<(), CopyError> {
        let mut f = std::fs::File::from(fd).take(size);
        let mut buf = vec![0u8; 64 << 10];
        let mut left = size;
        while left > 0 {
            let n = match f.read(&mut buf) {
                Ok(0) => {
                    return Err(CopyError::Stream(format!("{} shrank while it was copied", self.shown(tar_name))));
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let errno = crate::sys::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
                    return Err(CopyError::fs(self.shown(tar_name), errno));
                }
            };
            self.out.data(&buf[..n]).map_err(CopyError::io)?;
            left -= n as u64;
        }
        self.out.pad(size).map_err(CopyError::io)
    }
}

/// The names in a directory, but `.` and `..`.
pub(crate) fn children(dir: &OwnedFd) -> Result<Vec<CString>, crate::sys::Errno> {
    let dup = nix::unistd::dup(dir)?;
    let mut d = Dir::from_fd(dup)?;
    let mut names = Vec::new();
    for e in d.iter() {
        let e = e?;
        let n = e.file_name();
        if n.to_bytes() != b"." && n.to_bytes() != b".." {
            names.push(n.to_owned());
        }
    }
    Ok(names)
}
