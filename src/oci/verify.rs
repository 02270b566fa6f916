//! Opening the files init trusts by what they *are*, not by their path
//! (the CVE-2025-31133/52565/52881 family): inside the container every
//! path is the image's or a racing container's to redirect, so /dev/null
//! is opened without following a symlink and must be the 1:3 char device
//! before it masks anything, the pty master must be devpts' 5:2 ptmx, and
//! a write to /proc/sys or /proc/<pid> goes through a procfs of our own.

use crate::sys::Errno;
use crate::sys::mount::{FsContext, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID};
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, open, openat2};
use nix::sys::stat::{Mode, SFlag, fstat, major, minor};
use nix::sys::statfs::{FsType, PROC_SUPER_MAGIC, fstatfs};
use std::os::fd::OwnedFd;

const DEVPTS_SUPER_MAGIC: FsType = FsType(0x1cd1);

/// `path` opened O_PATH without following a final symlink, checked to be
/// the char device `maj:min` (EPERM when it is anything else).
pub fn char_device(path: &str, maj: u64, min: u64) -> Result<OwnedFd, Errno> {
    let fd = open(path, OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())?;
    let st = fstat(&fd)?;
    let is_char = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
    if !is_char || major(st.st_rdev) != maj || minor(st.st_rdev) != min {
        return Err(Errno::EPERM);
    }
    Ok(fd)
}

/// The container's devpts ptmx (/dev/pts/ptmx, not the /dev/ptmx symlink
/// an image may point anywhere), opened as the master of a new pty.
pub fn ptmx() -> Result<OwnedFd, Errno> {
    let fd =
        open("/dev/pts/ptmx", OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())?;
    let st = fstat(&fd)?;
    let is_char = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
    if !is_char
        || major(st.st_rdev) != 5
        || minor(st.st_rdev) != 2
        || fstatfs(&fd)?.filesystem_type() != DEVPTS_SUPER_MAGIC
    {
        return Err(Errno::EPERM);
    }
    Ok(fd)
}

/// A procfs of our own, mounted detached: nothing can be mounted over its
/// files, so a write through it reaches the file named (a bind of another
/// procfs file over /proc/sys/X would otherwise take it: CVE-2025-52881).
/// None where the kernel refuses one (a user namespace whose /proc is not
/// fully visible); the writes then go through /proc, checked to be procfs.
pub fn private_proc() -> Option<OwnedFd> {
    let ctx = FsContext::open(c"proc").ok()?;
    ctx.mount(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC).ok()
}

/// Writes `value` to `rel` under procfs: through `proc` (from
/// `private_proc`) without crossing a mount or following a symlink, or
/// else /proc/`rel`; refused (EXDEV) when what opened is not on procfs.
pub fn write_proc(proc: Option<&OwnedFd>, rel: &str, value: &str) -> Result<(), Errno> {
    let fd = match proc {
        Some(p) => {
            let how = OpenHow::new().flags(OFlag::O_WRONLY | OFlag::O_CLOEXEC).resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_XDEV
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
            openat2(p, rel, how)?
        }
        None => open(
            format!("/proc/{rel}").as_str(),
            OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?,
    };
    if fstatfs(&fd)?.filesystem_type() != PROC_SUPER_MAGIC {
        return Err(Errno::EXDEV);
    }
    let n = nix::unistd::write(&fd, value.as_bytes())?;
    if n != value.len() {
        return Err(Errno::EIO);
    }
    Ok(())
}
