//! Executing a `MountPlan` in the child (inside its new user and mount
//! namespaces). Every target is resolved with openat2(RESOLVE_IN_ROOT) from
//! an fd of the new root and mounted onto by fd, so neither an image symlink
//! nor a path swapped after planning can redirect a mount to the host.

use super::{Entry, MountKind, MountOp, MountPlan, OverlayPlan, RootPlan, UpperPlan};
use crate::step::{AtStep, Step, StepError};
use crate::sys::Errno;
use crate::sys::mount::{
    FsContext, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, OPEN_TREE_CLOEXEC,
    OPEN_TREE_CLONE, mount_setattr, move_mount_fd, move_mount_to_path, open_tree,
};
use nix::fcntl::{AT_FDCWD, OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::mount::{MntFlags, MsFlags};
use nix::sys::stat::{Mode, SFlag, fstat, mkdirat, mknodat};
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

type R<T> = Result<T, StepError>;

/// Staging-relative empty directory that masked directories are bound to.
const EMPTY_DIR: &CStr = c"e";

/// Opens `path` inside the tree rooted at `root` (O_PATH), never leaving it.
pub fn open_in_root(root: BorrowedFd<'_>, path: &CStr) -> Result<OwnedFd, Errno> {
    let path = if path.is_empty() { c"." } else { path };
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(root, path, how)
}

/// Splits "a/b/c" into ("a/b", "c"); ("", "c") for a single component.
fn split_parent(path: &CStr) -> (CString, CString) {
    let bytes = path.to_bytes();
    match bytes.iter().rposition(|&b| b == b'/') {
        Some(i) => (CString::new(&bytes[..i]).unwrap_or_default(), CString::new(&bytes[i + 1..]).unwrap_or_default()),
        None => (CString::default(), path.to_owned()),
    }
}

/// Creates `entry` under `base` (its parent resolved inside `base`).
/// An existing entry of the same kind is accepted.
pub fn create_entry(base: BorrowedFd<'_>, entry: &Entry) -> Result<(), Errno> {
    let (parent, name) = split_parent(entry.path());
    let dir = if parent.is_empty() { None } else { Some(open_in_root(base, &parent)?) };
    // O_PATH fds serve as dirfd for the *at calls below.
    let dirfd = dir.as_ref().map(|d| d.as_fd()).unwrap_or(base);
    let exists_ok = |r: Result<(), Errno>| match r {
        Err(Errno::EEXIST) => Ok(()),
        other => other,
    };
    match entry {
        Entry::Dir { mode, .. } => exists_ok(mkdirat(dirfd, name.as_c_str(), Mode::from_bits_truncate(*mode))),
        Entry::File { mode, data, .. } => {
            let fd = match openat(
                dirfd,
                name.as_c_str(),
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(*mode),
            ) {
                Err(Errno::EEXIST) if data.is_empty() => return Ok(()),
                other => other?,
            };
            let mut off = 0;
            while off < data.len() {
                match nix::unistd::write(&fd, &data[off..]) {
                    Ok(n) => off += n,
                    Err(Errno::EINTR) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }
        Entry::Symlink { target, .. } => exists_ok(nix::unistd::symlinkat(target.as_c_str(), dirfd, name.as_c_str())),
        Entry::Whiteout { .. } => {
            exists_ok(mknodat(dirfd, name.as_c_str(), SFlag::S_IFCHR, Mode::empty(), nix::sys::stat::makedev(0, 0)))
        }
    }
}

/// Root of the new tree and the staging tmpfs it was built in.
pub struct Assembled {
    pub root: OwnedFd,
    pub staging: OwnedFd,
}

/// Steps private_mounts .. read_only_root: everything up to pivot_root.
pub fn assemble(plan: &MountPlan) -> R<Assembled> {
    let assembled = prepare(plan, |_| true)?;
    mount_ops(plan, &assembled)?;
    seal_root(plan, &assembled)?;
    Ok(assembled)
}

/// Steps private_mounts .. assemble_root: clones the host trees of the root
/// and of the ops `wanted` selects (by index), makes every mount private, mounts the
/// staging tmpfs and builds the root (scaffold tmpfs or overlay) in it. The
/// ops themselves are left to `mount_ops` (native) or to another runtime
/// (runsc mounts them as OCI mounts, see `stage`).
pub fn prepare(plan: &MountPlan, wanted: impl Fn(usize) -> bool) -> R<Assembled> {
    // Clone every host tree while all host paths are still visible (the
    // staging tmpfs below may cover one of them).
    let ops = plan.ops.iter().enumerate().filter(|(i, _)| wanted(*i)).flat_map(|(_, op)| op.sources());
    for src in plan.root_sources().chain(ops) {
        src.open().at(Step::OpenSources)?;
    }
    // Nothing we mount may propagate back to the host, nor host mounts in.
    nix::mount::mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .at(Step::PrivateMounts)?;

    let staging = tmpfs_mount(8 << 20, 0o700, None, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV).at(Step::Staging)?;
    move_mount_to_path(staging.as_fd(), AT_FDCWD, &plan.staging).at(Step::Staging)?;
    mkdirat(staging.as_fd(), EMPTY_DIR, Mode::from_bits_truncate(0o555)).at(Step::Staging)?;

    let root = match &plan.root {
        RootPlan::Tmpfs { entries } => {
            let root =
                tmpfs_mount(1 << 20, 0o755, None, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV).at(Step::AssembleRoot)?;
            mkdir_ok(staging.as_fd(), c"r").at(Step::AssembleRoot)?;
            move_mount_to_path(root.as_fd(), staging.as_fd(), c"r").at(Step::AssembleRoot)?;
            for e in entries {
                create_entry(root.as_fd(), e).at(Step::AssembleRoot)?;
            }
            root
        }
        RootPlan::Overlay(ov) => {
            mkdir_ok(staging.as_fd(), c"r").at(Step::AssembleRoot)?;
            mount_overlay(staging.as_fd(), ov, &plan.root_mountpoint).at(Step::AssembleRoot)?;
            // Our own staging path, not sandbox content: a plain open.
            nix::fcntl::open(
                plan.root_mountpoint.as_c_str(),
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .at(Step::AssembleRoot)?
        }
    };
    Ok(Assembled { root, staging })
}

/// Step mount_filesystems: every op of the plan, in order, inside the root.
pub fn mount_ops(plan: &MountPlan, a: &Assembled) -> R<()> {
    for (i, op) in plan.ops.iter().enumerate() {
        run_op(a.root.as_fd(), a.staging.as_fd(), &plan.staging, op).map_err(|errno| StepError {
            step: Step::MountFilesystems,
            errno,
            detail: i as u32,
        })?;
    }
    Ok(())
}

/// Step read_only_root: the host-mode scaffold tmpfs becomes read-only once
/// everything is mounted into it (an overlay root is mounted read-only).
pub fn seal_root(plan: &MountPlan, a: &Assembled) -> R<()> {
    if matches!(plan.root, RootPlan::Tmpfs { .. }) {
        mount_setattr(a.root.as_fd(), false, MOUNT_ATTR_RDONLY, 0).at(Step::ReadOnlyRoot)?;
    }
    Ok(())
}

/// Mounts the tree of a bind or overlay op at `name` in the staging area
/// instead of at its target inside the root: for a runtime that mounts it
/// itself from there (runsc's gofer serves only the mounts its OCI spec
/// names, not mounts nested inside the root directory). A file source gets
/// a file as mount point. Other kinds are EINVAL.
pub fn stage(a: &Assembled, op: &MountOp, name: &CStr) -> Result<(), Errno> {
    let staging = a.staging.as_fd();
    match &op.kind {
        MountKind::Bind { source, attrs } => {
            let tree = source.tree()?;
            mount_setattr(tree, source.recursive, *attrs, 0)?;
            let st = fstat(tree)?;
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
                mkdir_ok(staging, name)?;
            } else {
                let entry = Entry::File { path: name.to_owned(), mode: 0o600, data: Vec::new() };
                create_entry(staging, &entry)?;
            }
            move_mount_to_path(tree, staging, name)
        }
        MountKind::Overlay(ov) => {
            mkdir_ok(staging, name)?;
            let target = open_in_root(staging, name)?;
            let path = CString::new(format!("/proc/self/fd/{}", target.as_raw_fd())).unwrap_or_default();
            mount_overlay(staging, ov, &path)
        }
        _ => Err(Errno::EINVAL),
    }
}

/// pivot_root into `root` and detach the old root entirely (the
/// `pivot_root(".", ".")` idiom needs no directory inside the new root).
pub fn pivot(root: BorrowedFd<'_>) -> R<()> {
    nix::unistd::fchdir(root).at(Step::PivotRoot)?;
    nix::unistd::pivot_root(".", ".").at(Step::PivotRoot)?;
    nix::mount::umount2(".", MntFlags::MNT_DETACH).at(Step::PivotRoot)?;
    nix::unistd::chdir("/").at(Step::PivotRoot)
}

fn mkdir_ok(dir: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    match mkdirat(dir, name, Mode::from_bits_truncate(0o755)) {
        Err(Errno::EEXIST) => Ok(()),
        other => other,
    }
}

fn tmpfs_mount(size: u64, mode: u32, owner: Option<(u32, u32)>, attrs: u64) -> Result<OwnedFd, Errno> {
    let ctx = FsContext::open(c"tmpfs")?;
    ctx.set_string(c"size", &num(size))?;
    ctx.set_string(c"mode", &CString::new(format!("{mode:o}")).unwrap_or_default())?;
    if let Some((uid, gid)) = owner {
        ctx.set_string(c"uid", &num(uid as u64))?;
        ctx.set_string(c"gid", &num(gid as u64))?;
    }
    ctx.mount(attrs)
}

fn num(n: u64) -> CString {
    CString::new(n.to_string()).unwrap_or_default()
}

fn mount_overlay(staging: BorrowedFd<'_>, ov: &OverlayPlan, target: &CStr) -> Result<(), Errno> {
    for (name, src) in &ov.lowers {
        let (parent, _) = split_parent(name);
        if !parent.is_empty() {
            mkdir_ok(staging, &parent)?;
        }
        mkdir_ok(staging, name)?;
        let tree = src.tree()?;
        mount_setattr(tree, false, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0)?;
        move_mount_to_path(tree, staging, name)?;
    }
    mkdir_ok(staging, &ov.top_dir)?;
    let top = open_in_root(staging, &ov.top_dir)?;
    for e in &ov.top {
        create_entry(top.as_fd(), e)?;
    }
    let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    match (&ov.upper, &ov.upper_dirs) {
        (Some(upper), Some((mnt, up, work))) => {
            mkdir_ok(staging, mnt)?;
            match upper {
                UpperPlan::Tmpfs { size, .. } => {
                    let t = tmpfs_mount(*size, 0o755, None, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)?;
                    move_mount_to_path(t.as_fd(), staging, mnt)?;
                }
                UpperPlan::Keep(src) => {
                    let tree = src.tree()?;
                    mount_setattr(tree, false, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0)?;
                    move_mount_to_path(tree, staging, mnt)?;
                }
            }
            mkdir_ok(staging, up)?;
            mkdir_ok(staging, work)?;
            if let UpperPlan::Tmpfs { owner: Some((uid, gid)), .. } = upper {
                nix::unistd::fchownat(
                    staging,
                    up.as_c_str(),
                    Some((*uid).into()),
                    Some((*gid).into()),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )?;
            }
        }
        _ => flags |= MsFlags::MS_RDONLY,
    }
    nix::mount::mount(Some(c"overlay"), target, Some(c"overlay"), flags, Some(ov.options.as_c_str()))
}

fn run_op(root: BorrowedFd<'_>, staging: BorrowedFd<'_>, staging_path: &CStr, op: &MountOp) -> Result<(), Errno> {
    if let MountKind::Create(entry) = &op.kind {
        return create_entry(root, entry);
    }
    let target = match open_in_root(root, &op.target) {
        Err(Errno::ENOENT) if op.optional => return Ok(()),
        other => other?,
    };
    let attach = |fd: BorrowedFd<'_>| move_mount_fd(fd, target.as_fd());
    let sys = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    match &op.kind {
        MountKind::Bind { source, attrs } => {
            let tree = source.tree()?;
            mount_setattr(tree, source.recursive, *attrs, 0)?;
            attach(tree)
        }
        MountKind::Tmpfs { size, mode, owner, attrs } => attach(tmpfs_mount(*size, *mode, *owner, *attrs)?.as_fd()),
        MountKind::Proc => attach(FsContext::open(c"proc")?.mount(sys)?.as_fd()),
        MountKind::Sysfs => attach(FsContext::open(c"sysfs")?.mount(sys | MOUNT_ATTR_RDONLY)?.as_fd()),
        MountKind::Mqueue => attach(FsContext::open(c"mqueue")?.mount(sys)?.as_fd()),
        MountKind::Devpts { gid } => {
            let ctx = FsContext::open(c"devpts")?;
            ctx.set_flag(c"newinstance")?;
            ctx.set_string(c"ptmxmode", c"0666")?;
            ctx.set_string(c"mode", c"0620")?;
            if let Some(g) = gid {
                ctx.set_string(c"gid", &num(*g as u64))?;
            }
            attach(ctx.mount(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC)?.as_fd())
        }
        MountKind::Overlay(ov) => {
            let _ = staging_path;
            let path = CString::new(format!("/proc/self/fd/{}", target.as_raw_fd())).unwrap_or_default();
            mount_overlay(staging, ov, &path)
        }
        MountKind::Populate(entries) => {
            for e in entries {
                create_entry(target.as_fd(), e)?;
            }
            Ok(())
        }
        MountKind::Mask => {
            let st = fstat(&target)?;
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
                // A read-only clone of the staging area's empty directory:
                // far cheaper than a tmpfs per masked directory.
                let empty = open_tree(staging, EMPTY_DIR, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)?;
                mount_setattr(empty.as_fd(), false, sys | MOUNT_ATTR_RDONLY, 0)?;
                attach(empty.as_fd())
            } else {
                let null = open_tree(AT_FDCWD, c"/dev/null", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)?;
                mount_setattr(null.as_fd(), false, sys | MOUNT_ATTR_RDONLY, 0)?;
                attach(null.as_fd())
            }
        }
        MountKind::ReadOnly => {
            let flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as u32 | libc::AT_RECURSIVE as u32;
            let tree = open_tree(target.as_fd(), c"", flags)?;
            mount_setattr(tree.as_fd(), true, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0)?;
            attach(tree.as_fd())
        }
        MountKind::SetReadOnly => mount_setattr(target.as_fd(), false, MOUNT_ATTR_RDONLY, 0),
        MountKind::Create(_) => unreachable!("handled above"),
    }
}
