//! The husk binary that enters a container is never the writable host file
//! (CVE-2019-5736). `create`, `run` and `exec` put husk processes into the
//! container's namespaces (init until its execve, exec's process until
//! its own); a root process in there with CAP_SYS_PTRACE (a privileged
//! container: non-dumpable does not stop it) can open their
//! /proc/<pid>/exe, wait until no husk runs, reopen it for writing and
//! replace the host's runtime. So before anything else these verbs re-exec
//! husk from a copy nobody can write, as runc does (libcontainer/exeseal):
//!
//! 1. a read-only overlayfs of the binary's directory, mounted detached
//!    (never attached anywhere: nothing reaches it but our open file), and
//!    the binary opened in it: writing through it is EROFS, and nothing is
//!    copied;
//! 2. where that is refused (no CAP_SYS_ADMIN, no overlayfs): a memfd copy
//!    sealed against writes, growth and shrinking.
//!
//! A binary that already runs from a read-only mount or a write-sealed
//! memfd (this re-exec's second start) is left as it is.

use super::OciError;
use crate::sys::fd::CStrArray;
use crate::sys::mount::{FsContext, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
use nix::fcntl::{FcntlArg, OFlag, SealFlag, fcntl};
use nix::sys::stat::Mode;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// Re-execs husk from a sealed copy unless it already runs from one;
/// returns when it does (the error says why neither copy could be made).
pub fn ensure_sealed() -> Result<(), OciError> {
    let exe = nix::fcntl::open("/proc/self/exe", OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| OciError::sys("opening /proc/self/exe", e))?;
    if is_sealed(&exe) {
        return Ok(());
    }
    let sealed = match overlay_copy() {
        Ok(fd) => fd,
        Err(overlay) => memfd_copy(exe).map_err(|e| {
            OciError::Refused(format!(
                "cannot run husk from a copy the container cannot write (CVE-2019-5736): read-only overlay: {overlay}; \
                 sealed memfd: {e}"
            ))
        })?,
    };
    let argv = CStrArray::new(std::env::args_os().map(|a| cstring(a.as_bytes())).collect());
    let envp = CStrArray::new(
        std::env::vars_os()
            .map(|(k, v)| {
                let mut b = k.as_bytes().to_vec();
                b.push(b'=');
                b.extend_from_slice(v.as_bytes());
                cstring(&b)
            })
            .collect(),
    );
    let e = crate::sys::process::execve_fd(sealed.as_fd(), &argv, &envp);
    Err(OciError::sys("re-executing husk from its sealed copy", e))
}

fn cstring(b: &[u8]) -> CString {
    CString::new(b.iter().copied().filter(|c| *c != 0).collect::<Vec<u8>>()).unwrap_or_default()
}

/// On a read-only mount (writes through any path to it are EROFS), or a
/// memfd sealed against writes.
fn is_sealed(exe: &OwnedFd) -> bool {
    let ro = nix::sys::statvfs::fstatvfs(exe).is_ok_and(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
    let seals = fcntl(exe, FcntlArg::F_GET_SEALS).ok().map(SealFlag::from_bits_truncate);
    ro || seals.is_some_and(|s| s.contains(SealFlag::F_SEAL_WRITE))
}

/// A step of making the sealed copy that failed: what, and why.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {err}")]
struct SealFailed {
    what: String,
    err: std::io::Error,
}

fn step<E: Into<std::io::Error>>(what: impl Into<String>) -> impl FnOnce(E) -> SealFailed {
    let what = what.into();
    move |e| SealFailed { what, err: e.into() }
}

/// The binary opened in a detached read-only overlayfs of its directory.
fn overlay_copy() -> Result<OwnedFd, SealFailed> {
    let path = std::fs::read_link("/proc/self/exe").map_err(step("readlink /proc/self/exe"))?;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(SealFailed { what: path.display().to_string(), err: std::io::Error::other("no directory") });
    };
    let ctx = FsContext::open(c"overlay").map_err(step("fsopen overlay"))?;
    ctx.set_flag(c"ro").map_err(step("ro"))?;
    // No upper layer: a read-only overlay with nothing to copy up into.
    // Without one the kernel wants two lower layers; the second is an
    // empty read-only tmpfs, mounted detached like the overlay.
    let empty = FsContext::open(c"tmpfs")
        .and_then(|t| t.mount(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID))
        .map_err(step("an empty tmpfs"))?;
    let mut lower = dir.as_os_str().as_bytes().to_vec();
    lower.extend_from_slice(format!(":/proc/self/fd/{}", empty.as_raw_fd()).as_bytes());
    ctx.set_string(c"lowerdir", &cstring(&lower)).map_err(step(format!("lowerdir {}", dir.display())))?;
    let mnt = ctx
        .mount(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID)
        .map_err(step(format!("mounting the overlay of {}", dir.display())))?;
    let fd = nix::fcntl::openat(&mnt, name, OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW, Mode::empty())
        .map_err(step(format!("opening {} in the overlay", name.to_string_lossy())))?;
    if !is_sealed(&fd) {
        return Err(SealFailed { what: "the overlay".into(), err: std::io::Error::other("not read-only") });
    }
    Ok(fd)
}

/// A memfd holding a copy of the binary, sealed.
fn memfd_copy(exe: OwnedFd) -> Result<OwnedFd, SealFailed> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let fd = memfd_create(c"husk-sealed", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)
        .map_err(step("memfd_create"))?;
    let mut from = std::fs::File::from(exe);
    let mut to = std::fs::File::from(fd);
    std::io::copy(&mut from, &mut to).map_err(step("copying the binary"))?;
    let seals = SealFlag::F_SEAL_SEAL | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_WRITE;
    fcntl(&to, FcntlArg::F_ADD_SEALS(seals)).map_err(step("sealing"))?;
    Ok(OwnedFd::from(to))
}
