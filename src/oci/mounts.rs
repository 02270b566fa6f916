//! The container's filesystem, built by its init (child side): rootfs
//! propagation, the rootfs bound onto itself, the spec's mounts, device
//! nodes, pivot_root, then masked and read-only paths. Every target under
//! the rootfs is resolved with openat2(RESOLVE_IN_ROOT) and mounted onto
//! through /proc/self/fd, so an image's symlink (`/dev -> /`) cannot
//! redirect a mount to the host (CVE-2019-19921 class).

use super::config::{MountKind, OciDevice, OciMount, OciPlan};
use crate::rootfs::mount::open_in_root;
use crate::step::{AtStep, Step, StepError};
use crate::sys::Errno;
use crate::sys::mount::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, mount_setattr};
use nix::fcntl::{OFlag, open};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::stat::{Mode, SFlag, mkdirat, mknodat};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

type R<T> = Result<T, StepError>;

/// A failed step with the mount's destination for the message.
pub struct MountFail(pub StepError, pub String);

impl From<StepError> for MountFail {
    fn from(e: StepError) -> Self {
        MountFail(e, String::new())
    }
}

const NONE: Option<&str> = None;

fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Opens (O_PATH) `dest` inside `root`, creating what is missing: parent
/// directories, and the last component as a directory or, for a bind of a
/// file, an empty file.
fn ensure_in_root(root: &OwnedFd, dest: &str, file: bool) -> Result<OwnedFd, Errno> {
    let rel = dest.trim_start_matches('/');
    if rel.is_empty() {
        return open_in_root(root.as_fd(), c".");
    }
    let c = CString::new(rel).map_err(|_| Errno::EINVAL)?;
    match open_in_root(root.as_fd(), &c) {
        Ok(fd) => return Ok(fd),
        Err(Errno::ENOENT) => {}
        Err(e) => return Err(e),
    }
    let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    let pfd = ensure_in_root(root, parent, false)?;
    // The parent is O_PATH: reopen it as a directory to create in it.
    let dir = open(fd_path(&pfd).as_str(), OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())?;
    let made = if file {
        mknodat(&dir, name, SFlag::S_IFREG, Mode::from_bits_truncate(0o644), 0)
    } else {
        mkdirat(&dir, name, Mode::from_bits_truncate(0o755))
    };
    match made {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(e),
    }
    let c = CString::new(rel).map_err(|_| Errno::EINVAL)?;
    open_in_root(root.as_fd(), &c)
}

/// Before pivot_root: propagation, the rootfs as a mount of its own, the
/// spec's mounts and the device nodes. `cgroup_dirs` are the container's
/// cgroup directories (controller -> host dir) for `cgroup` mounts.
pub fn prepare_root(plan: &OciPlan, cgroup_dirs: &[(String, PathBuf)], in_userns: bool) -> Result<(), MountFail> {
    mount(NONE, "/", NONE, MsFlags::from_bits_truncate(plan.rootfs_propagation), NONE).at(Step::RootfsPropagation)?;
    // With rootfsPropagation rshared (Kubernetes' Bidirectional volumes)
    // the mount holding the rootfs is a peer of the host's: the rootfs bind
    // and every mount under it would appear in the host's namespace too
    // (and stay there when create fails), and pivot_root refuses a new root
    // whose parent is shared (EINVAL). runc makes that one mount private,
    // not recursively: volume binds keep their source's peer group, so
    // what the container mounts under an rshared volume still reaches the
    // host.
    let parent = mount_point_of(&plan.rootfs);
    mount(NONE, parent.as_path(), NONE, MsFlags::MS_PRIVATE, NONE)
        .map_err(|e| MountFail(StepError::new(Step::RootfsPropagation, e), parent.display().to_string()))?;
    // pivot_root needs the new root to be a mount point.
    mount(Some(&plan.rootfs), &plan.rootfs, NONE, MsFlags::MS_BIND | MsFlags::MS_REC, NONE).at(Step::AssembleRoot)?;
    let root = open(&plan.rootfs, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .at(Step::AssembleRoot)?;
    for m in &plan.mounts {
        mount_one(&root, m, cgroup_dirs, in_userns).map_err(|e| MountFail(e, m.destination.clone()))?;
    }
    make_devices(&root, plan, in_userns)?;
    Ok(())
}

/// The mount point of the mount holding `path` (canonical): the longest
/// mount point in /proc/self/mountinfo that contains it, the last listed
/// (the one on top) when several share it. "/" when none is found.
fn mount_point_of(path: &Path) -> PathBuf {
    let info = crate::files::read_text("/proc/self/mountinfo").unwrap_or_default();
    let mut best = PathBuf::from("/");
    for line in info.lines() {
        let Some(mp) = line.split(' ').nth(4) else { continue };
        let mp = PathBuf::from(crate::files::unescape_mountinfo(mp));
        if path.starts_with(&mp) && mp.as_os_str().len() >= best.as_os_str().len() {
            best = mp;
        }
    }
    best
}

fn mount_one(root: &OwnedFd, m: &OciMount, cgroup_dirs: &[(String, PathBuf)], in_userns: bool) -> R<()> {
    let step = Step::MountFilesystems;
    let is_file_bind = matches!(m.kind, MountKind::Bind { .. }) && !m.source.is_dir();
    let target = ensure_in_root(root, &m.destination, is_file_bind).at(step)?;
    let t = fd_path(&target);
    match &m.kind {
        MountKind::Bind { recursive } => {
            let rec = if *recursive { MsFlags::MS_REC } else { MsFlags::empty() };
            mount(Some(&m.source), t.as_str(), NONE, MsFlags::MS_BIND | rec, NONE).at(step)?;
            let fresh = ensure_in_root(root, &m.destination, is_file_bind).at(step)?;
            set_attrs(&fresh, m.flags, m.recursive_ro).at(step)?;
        }
        MountKind::Fs(fstype) => {
            let flags = MsFlags::from_bits_truncate(m.flags);
            let data = (!m.data.is_empty()).then_some(m.data.as_str());
            let r = mount(Some(&m.source), t.as_str(), Some(fstype.as_str()), flags, data);
            match (r, fstype.as_str()) {
                (Ok(()), _) => {}
                // Without its own network namespace (or in a user namespace
                // that does not own it) sysfs cannot be mounted fresh; runc
                // binds the host's read-only instead.
                (Err(Errno::EPERM), "sysfs") => {
                    mount(Some("/sys"), t.as_str(), NONE, MsFlags::MS_BIND | MsFlags::MS_REC, NONE).at(step)?;
                    let fresh = ensure_in_root(root, &m.destination, false).at(step)?;
                    set_attrs(&fresh, m.flags | libc::MS_RDONLY, true).at(step)?;
                }
                // mqueue in a user namespace that does not own the ipc one.
                (Err(Errno::EPERM), "mqueue") if in_userns => {
                    mount(Some("/dev/mqueue"), t.as_str(), NONE, MsFlags::MS_BIND, NONE).at(step)?;
                }
                (Err(e), _) => return Err(StepError::new(step, e)),
            }
        }
        MountKind::Cgroup => {
            // The container's own cgroup directories, not the host's whole
            // hierarchies: a tmpfs with one bind per controller (v1), or the
            // one directory (v2).
            if let [(name, dir)] = cgroup_dirs
                && name.is_empty()
            {
                mount(Some(dir), t.as_str(), NONE, MsFlags::MS_BIND | MsFlags::MS_REC, NONE).at(step)?;
            } else {
                mount(
                    Some("tmpfs"),
                    t.as_str(),
                    Some("tmpfs"),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                    Some("mode=755"),
                )
                .at(step)?;
                for (name, dir) in cgroup_dirs {
                    let sub = format!("{}/{name}", m.destination.trim_end_matches('/'));
                    let fd = ensure_in_root(root, &sub, false).at(step)?;
                    mount(Some(dir), fd_path(&fd).as_str(), NONE, MsFlags::MS_BIND, NONE).at(step)?;
                    let fresh = ensure_in_root(root, &sub, false).at(step)?;
                    set_attrs(&fresh, m.flags | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, false).at(step)?;
                }
            }
            let fresh = ensure_in_root(root, &m.destination, false).at(step)?;
            set_attrs(&fresh, m.flags, false).at(step)?;
        }
    }
    if m.recursive_attrs != (0, 0) {
        let fresh = ensure_in_root(root, &m.destination, is_file_bind).at(step)?;
        mount_setattr(fresh.as_fd(), true, m.recursive_attrs.0, m.recursive_attrs.1).at(step)?;
    }
    if m.propagation != 0 {
        let fresh = ensure_in_root(root, &m.destination, is_file_bind).at(step)?;
        mount(NONE, fd_path(&fresh).as_str(), NONE, MsFlags::from_bits_truncate(m.propagation), NONE).at(step)?;
    }
    Ok(())
}

/// ro/nosuid/nodev/noexec on a mount through mount_setattr, which only
/// adds flags (a remount would have to repeat the locked ones of a mount
/// made in another user namespace, or fail with EPERM).
fn set_attrs(fd: &OwnedFd, flags: libc::c_ulong, recursive: bool) -> Result<(), Errno> {
    let mut set = 0;
    for (ms, attr) in [
        (libc::MS_RDONLY, MOUNT_ATTR_RDONLY),
        (libc::MS_NOSUID, MOUNT_ATTR_NOSUID),
        (libc::MS_NODEV, MOUNT_ATTR_NODEV),
        (libc::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
    ] {
        if flags & ms != 0 {
            set |= attr;
        }
    }
    if set == 0 {
        return Ok(());
    }
    // An O_PATH fd of the mount's root is what mount_setattr takes.
    mount_setattr(fd.as_fd(), recursive, set, 0)
}

/// The devices every container gets (runc's defaults), then the spec's.
const DEFAULT_DEVICES: &[(&str, u64, u64)] = &[
    ("/dev/null", 1, 3),
    ("/dev/zero", 1, 5),
    ("/dev/full", 1, 7),
    ("/dev/random", 1, 8),
    ("/dev/urandom", 1, 9),
    ("/dev/tty", 5, 0),
];

fn make_devices(root: &OwnedFd, plan: &OciPlan, in_userns: bool) -> R<()> {
    let step = Step::CreateDevices;
    // Only a /dev the spec mounts fresh is filled; a bound host /dev
    // (privileged containers) already has its nodes.
    if !plan.mounts.iter().any(|m| m.destination.trim_end_matches('/') == "/dev" && matches!(m.kind, MountKind::Fs(_)))
    {
        return Ok(());
    }
    let defaults = DEFAULT_DEVICES.iter().map(|(p, ma, mi)| OciDevice {
        path: p.to_string(),
        kind: 'c',
        major: *ma,
        minor: *mi,
        mode: 0o666,
        uid: 0,
        gid: 0,
    });
    for d in defaults.chain(plan.devices.iter().cloned()) {
        let (parent, name) = d.path.trim_start_matches('/').rsplit_once('/').unwrap_or(("", &d.path));
        let pfd = ensure_in_root(root, parent, false).at(step)?;
        let dir = open(fd_path(&pfd).as_str(), OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
            .at(step)?;
        if in_userns {
            // mknod of a device is refused in a user namespace: bind the
            // host's node (a spec device that does not exist on the host
            // is an error, as with runc).
            match mknodat(&dir, name, SFlag::S_IFREG, Mode::from_bits_truncate(0o644), 0) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(StepError::new(step, e)),
            }
            let fd = ensure_in_root(root, &d.path, true).at(step)?;
            mount(Some(Path::new(&d.path)), fd_path(&fd).as_str(), NONE, MsFlags::MS_BIND, NONE).at(step)?;
            continue;
        }
        let kind = match d.kind {
            'b' => SFlag::S_IFBLK,
            'p' => SFlag::S_IFIFO,
            _ => SFlag::S_IFCHR,
        };
        let dev = nix::sys::stat::makedev(d.major, d.minor);
        match mknodat(&dir, name, kind, Mode::from_bits_truncate(d.mode), dev) {
            Ok(()) => {}
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(StepError::new(step, e)),
        }
        // The umask may have cut the mode; the owner is the spec's.
        nix::sys::stat::fchmodat(
            &dir,
            name,
            Mode::from_bits_truncate(d.mode),
            nix::sys::stat::FchmodatFlags::NoFollowSymlink,
        )
        .or_else(|e| if e == Errno::EOPNOTSUPP { Ok(()) } else { Err(e) })
        .at(step)?;
        nix::unistd::fchownat(
            &dir,
            name,
            Some(d.uid.into()),
            Some(d.gid.into()),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .at(step)?;
    }
    for (link, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        let dev = ensure_in_root(root, "/dev", false).at(step)?;
        let dir = open(fd_path(&dev).as_str(), OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
            .at(step)?;
        match nix::unistd::symlinkat(to, &dir, link) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(StepError::new(step, e)),
        }
    }
    Ok(())
}

/// pivot_root into the rootfs; the old root is detached.
pub fn pivot(rootfs: &Path) -> Result<(), MountFail> {
    let named = |e| MountFail(StepError::new(Step::PivotRoot, e), rootfs.display().to_string());
    let old_root = open("/", OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()).map_err(named)?;
    nix::unistd::chdir(rootfs).map_err(named)?;
    nix::unistd::pivot_root(".", ".").map_err(named)?;
    // The old root is now stacked on the new one at "/": detach it (after
    // making it a slave, so the detach does not reach the host). "." must
    // be the old root's mount, not the new root's (the cwd after
    // pivot_root is not promised): an rslave of the new root would cut
    // every rshared volume off from the host.
    nix::unistd::fchdir(&old_root).at(Step::PivotRoot)?;
    drop(old_root);
    mount(NONE, ".", NONE, MsFlags::MS_SLAVE | MsFlags::MS_REC, NONE).at(Step::PivotRoot)?;
    umount2(".", MntFlags::MNT_DETACH).at(Step::PivotRoot)?;
    nix::unistd::chdir("/").at(Step::PivotRoot)?;
    Ok(())
}

/// After pivot_root (paths now resolve inside the container only):
/// maskedPaths hidden, readonlyPaths bound read-only.
pub fn mask_and_protect(plan: &OciPlan) -> Result<(), MountFail> {
    let step = Step::MaskPaths;
    // The image's /dev/null may be a symlink to a file it wants bound over
    // a masked path (CVE-2025-31133): only the real null device masks.
    let null = if plan.masked_paths.is_empty() {
        None
    } else {
        Some(super::verify::char_device("/dev/null", 1, 3).map_err(|e| {
            MountFail(StepError::new(step, e), "/dev/null is not the null device (1:3, not a symlink)".into())
        })?)
    };
    for p in &plan.masked_paths {
        // The target by fd too: not followed if it is a symlink.
        let target = match open(p.as_str(), OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(MountFail(StepError::new(step, e), p.clone())),
        };
        let r = match (nix::sys::stat::fstat(&target), &null) {
            // A symlink would take the mask elsewhere; refused, not skipped.
            (Ok(st), _) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK => Err(Errno::ELOOP),
            (Ok(st), _) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR => {
                mount(Some("tmpfs"), fd_path(&target).as_str(), Some("tmpfs"), MsFlags::MS_RDONLY, Some("size=0"))
            }
            (Ok(_), Some(null)) => {
                mount(Some(fd_path(null).as_str()), fd_path(&target).as_str(), NONE, MsFlags::MS_BIND, NONE)
            }
            (Ok(_), None) => Ok(()),
            (Err(e), _) => Err(e),
        };
        match r {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(MountFail(StepError::new(step, e), p.clone())),
        }
    }
    for p in &plan.readonly_paths {
        match mount(Some(p.as_str()), p.as_str(), NONE, MsFlags::MS_BIND | MsFlags::MS_REC, NONE) {
            Ok(()) => {}
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(StepError::new(step, e).into()),
        }
        let fd = open(p.as_str(), OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).at(step)?;
        set_attrs(&fd, libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, true).at(step)?;
    }
    Ok(())
}

/// root.readonly: the whole root read-only (not recursively: the spec's
/// own mounts keep their options).
pub fn readonly_root() -> R<()> {
    let fd = open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).at(Step::ReadOnlyRoot)?;
    set_attrs(&fd, libc::MS_RDONLY, false).at(Step::ReadOnlyRoot)
}
