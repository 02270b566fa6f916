//! The new mount API (open_tree, move_mount, mount_setattr, fsopen, fsconfig,
//! fsmount): mounts are handled as fds, so a target is never re-resolved
//! from a path string after it was checked.

use super::fd::owned;
use super::{SysResult, check};
use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

pub const OPEN_TREE_CLONE: u32 = 1;
pub const OPEN_TREE_CLOEXEC: u32 = libc::O_CLOEXEC as u32;

pub const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x04;
pub const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;

pub const MOUNT_ATTR_RDONLY: u64 = 0x01;
pub const MOUNT_ATTR_NOSUID: u64 = 0x02;
pub const MOUNT_ATTR_NODEV: u64 = 0x04;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x08;
/// The atime field of the attributes: one of RELATIME, NOATIME, STRICTATIME.
pub const MOUNT_ATTR_ATIME_MASK: u64 = 0x70;
pub const MOUNT_ATTR_RELATIME: u64 = 0x00;
pub const MOUNT_ATTR_NOATIME: u64 = 0x10;
pub const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
pub const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
pub const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x0020_0000;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

const FSOPEN_CLOEXEC: u32 = 1;
const FSMOUNT_CLOEXEC: u32 = 1;
const FSCONFIG_SET_FLAG: u32 = 0;
const FSCONFIG_SET_STRING: u32 = 1;
const FSCONFIG_CMD_CREATE: u32 = 6;

const EMPTY: &CStr = c"";

/// open_tree(2). With `OPEN_TREE_CLONE` this detaches a copy of the mount at
/// `path` (recursively with `AT_RECURSIVE`) that can later be attached with
/// `move_mount`, even from inside another mount namespace.
pub fn open_tree(dirfd: BorrowedFd<'_>, path: &CStr, flags: u32) -> SysResult<OwnedFd> {
    // SAFETY: `path` is a valid C string for the duration of the call.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, dirfd.as_raw_fd(), path.as_ptr(), flags) };
    check(ret).map(owned)
}

/// Attaches the mount `from` onto the object `to` refers to (an O_PATH fd
/// resolved inside the new root), without any path lookup.
pub fn move_mount_fd(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> SysResult<()> {
    // SAFETY: empty-path C strings and valid fds; flags select fd semantics.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            EMPTY.as_ptr(),
            to.as_raw_fd(),
            EMPTY.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    check(ret).map(|_| ())
}

/// Attaches the mount `from` at `path` (looked up relative to `dirfd`).
pub fn move_mount_to_path(from: BorrowedFd<'_>, dirfd: BorrowedFd<'_>, path: &CStr) -> SysResult<()> {
    // SAFETY: as above; `path` outlives the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            EMPTY.as_ptr(),
            dirfd.as_raw_fd(),
            path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check(ret).map(|_| ())
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// mount_setattr(2) on the mount `fd` refers to (recursively when `recursive`).
pub fn mount_setattr(fd: BorrowedFd<'_>, recursive: bool, set: u64, clear: u64) -> SysResult<()> {
    setattr(fd, recursive, MountAttr { attr_set: set, attr_clr: clear, propagation: 0, userns_fd: 0 })
}

/// mount_setattr(2) with MOUNT_ATTR_IDMAP: the detached mount `fd` (from
/// `open_tree(OPEN_TREE_CLONE)`, never yet attached) shows and writes its
/// files' ids through the id maps of the user namespace `userns`. The
/// kernel refuses (EINVAL) a filesystem without idmap support, a mount
/// already attached or already idmapped, and (EPERM) a caller without
/// CAP_SYS_ADMIN over the filesystem's superblock (host root, here).
pub fn mount_setattr_idmap(fd: BorrowedFd<'_>, recursive: bool, userns: BorrowedFd<'_>) -> SysResult<()> {
    // `userns` stays borrowed (so open) across the call that reads its fd.
    setattr(
        fd,
        recursive,
        MountAttr { attr_set: MOUNT_ATTR_IDMAP, attr_clr: 0, propagation: 0, userns_fd: userns.as_raw_fd() as u64 },
    )
}

fn setattr(fd: BorrowedFd<'_>, recursive: bool, mut attr: MountAttr) -> SysResult<()> {
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { libc::AT_RECURSIVE as u32 } else { 0 };
    // SAFETY: `attr` is a valid mount_attr for the call (any fd in it is
    // kept open by the caller's borrow); the path is empty.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            flags,
            &mut attr as *mut MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(ret).map(|_| ())
}

/// A filesystem context from fsopen(2), configured key by key.
pub struct FsContext(OwnedFd);

impl FsContext {
    pub fn open(fstype: &CStr) -> SysResult<Self> {
        // SAFETY: `fstype` is a valid C string.
        let ret = unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) };
        check(ret).map(|fd| FsContext(owned(fd)))
    }

    /// FSCONFIG_SET_STRING. Values longer than 256 bytes are refused by the
    /// kernel; overlay's `lowerdir+` exists to add layers one at a time.
    pub fn set_string(&self, key: &CStr, value: &CStr) -> SysResult<()> {
        // SAFETY: valid C strings; aux must be 0 for this command.
        let ret = unsafe {
            libc::syscall(libc::SYS_fsconfig, self.0.as_raw_fd(), FSCONFIG_SET_STRING, key.as_ptr(), value.as_ptr(), 0)
        };
        check(ret).map(|_| ())
    }

    pub fn set_flag(&self, key: &CStr) -> SysResult<()> {
        // SAFETY: valid C string; value must be NULL for a flag.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                self.0.as_raw_fd(),
                FSCONFIG_SET_FLAG,
                key.as_ptr(),
                std::ptr::null::<libc::c_char>(),
                0,
            )
        };
        check(ret).map(|_| ())
    }

    /// Creates the superblock and returns a detached mount with `attrs`
    /// (MOUNT_ATTR_*).
    pub fn mount(self, attrs: u64) -> SysResult<OwnedFd> {
        // SAFETY: integer/NULL arguments only.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                self.0.as_raw_fd(),
                FSCONFIG_CMD_CREATE,
                std::ptr::null::<libc::c_char>(),
                std::ptr::null::<libc::c_char>(),
                0,
            )
        };
        check(ret)?;
        // SAFETY: integer arguments only.
        let ret = unsafe { libc::syscall(libc::SYS_fsmount, self.0.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) };
        check(ret).map(owned)
    }
}
