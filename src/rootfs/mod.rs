//! The sandbox's filesystem view. A `MountPlan` is data: built and validated
//! on the host side (`plan`), then executed step by step in the child
//! (`mount`), where every target is resolved inside the new root by fd.

pub mod etc;
pub mod mount;
pub mod plan;
pub mod resolve;

use crate::sys::Errno;
use crate::sys::mount::{OPEN_TREE_CLOEXEC, OPEN_TREE_CLONE, mount_setattr_idmap, open_tree};
use nix::fcntl::AT_FDCWD;
use std::cell::OnceCell;
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub use plan::{MountPlanError, RootSource, build};

/// A host tree to mount: cloned with `open_tree(OPEN_TREE_CLONE)` into a
/// detached mount. Privileged runs clone it in the parent, as host root, so
/// the child (an unprivileged host id) needs no search permission on the
/// path's ancestors; otherwise the child clones it before it mounts
/// anything, while the host's paths are still all visible.
#[derive(Debug)]
pub struct Source {
    pub path: CString,
    pub recursive: bool,
    /// A `:rw` bind of a directory an unprivileged host user owns, in a
    /// privileged run: the tree is idmapped so that owner is the sandbox's
    /// user (`open_folded`). Applied by the native backend's parent only;
    /// where the tree is cloned without it (runsc, rootless), it is a plain
    /// bind as before.
    pub fold: Option<crate::userns::IdFold>,
    fd: OnceCell<OwnedFd>,
}

impl Source {
    pub fn new(path: &str, recursive: bool) -> Source {
        Source { path: cstring(path), recursive, fold: None, fd: OnceCell::new() }
    }

    /// Clones the tree now and idmaps it through `userns` (a namespace
    /// made by `userns::fold_namespace` from `self.fold`). Must run as host
    /// root, before the tree is attached anywhere.
    pub fn open_folded(&self, userns: BorrowedFd<'_>) -> Result<(), (&'static str, Errno)> {
        if self.fd.get().is_some() {
            return Ok(());
        }
        let rec = if self.recursive { libc::AT_RECURSIVE as u32 } else { 0 };
        let fd = open_tree(AT_FDCWD, &self.path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | rec)
            .map_err(|e| ("open_tree(OPEN_TREE_CLONE)", e))?;
        // The fold was chosen from the owner the plan saw at this path; the
        // path may name another tree now (swapped since): fold only the
        // tree that owner still owns, else refuse (EAGAIN: try again).
        if let Some(f) = &self.fold {
            let st = nix::sys::stat::fstat(&fd).map_err(|e| ("fstat of the cloned tree", e))?;
            if (st.st_uid, st.st_gid) != (f.from_uid, f.from_gid) {
                return Err(("the bind source's owner changed since it was planned", Errno::EAGAIN));
            }
        }
        mount_setattr_idmap(fd.as_fd(), self.recursive, userns).map_err(|e| ("mount_setattr(MOUNT_ATTR_IDMAP)", e))?;
        let _ = self.fd.set(fd);
        Ok(())
    }

    /// Clones the tree now, unless that already happened.
    pub fn open(&self) -> Result<(), Errno> {
        if self.fd.get().is_none() {
            let rec = if self.recursive { libc::AT_RECURSIVE as u32 } else { 0 };
            let fd = open_tree(AT_FDCWD, &self.path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | rec)?;
            let _ = self.fd.set(fd);
        }
        Ok(())
    }

    /// Lets go of the cloned tree, so the next `open` clones it afresh: a
    /// clone attached once (in a mount namespace that is gone now) cannot
    /// be attached again (runsc's restore stages the root a second time).
    pub fn forget_tree(&mut self) {
        self.fd.take();
    }

    /// The detached tree; EBADF if `open` never ran.
    pub fn tree(&self) -> Result<BorrowedFd<'_>, Errno> {
        self.fd.get().map(|f| f.as_fd()).ok_or(Errno::EBADF)
    }
}

/// Something the child creates in a fresh tmpfs (the scaffold layer, /dev).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Dir {
        path: CString,
        mode: u32,
    },
    File {
        path: CString,
        mode: u32,
        data: Vec<u8>,
    },
    Symlink {
        path: CString,
        target: CString,
    },
    /// An overlay whiteout (char device 0:0): hides the same path below.
    Whiteout {
        path: CString,
    },
}

impl Entry {
    pub fn path(&self) -> &CString {
        match self {
            Entry::Dir { path, .. }
            | Entry::File { path, .. }
            | Entry::Symlink { path, .. }
            | Entry::Whiteout { path } => path,
        }
    }
}

/// An overlay: a fresh top layer (`top`, written by the child into the
/// staging tmpfs) over read-only lower trees.
#[derive(Debug)]
pub struct OverlayPlan {
    pub top: Vec<Entry>,
    /// Staging-relative directory of the top layer.
    pub top_dir: CString,
    /// Lower trees, top first, each with its staging-relative mount point.
    pub lowers: Vec<(CString, Source)>,
    /// The writable upper layer, if any.
    pub upper: Option<UpperPlan>,
    /// Staging-relative dirs of the upper (mount point, upper, work).
    pub upper_dirs: Option<(CString, CString, CString)>,
    /// The complete mount(2) data string, pre-built (absolute staging paths).
    pub options: CString,
}

/// Where an overlay's writes go.
#[derive(Debug)]
pub enum UpperPlan {
    /// A tmpfs of this size (`--writable`; the workdir over an image's
    /// files there), discarded at exit. `owner`: inner uid/gid the upper
    /// directory gets (the merged root shows it), when not the mounter's.
    Tmpfs { size: u64, owner: Option<(u32, u32)> },
    /// A host directory that outlives the sandbox (`husk build`'s RUN
    /// steps: its content becomes a layer). The child makes `u/` and
    /// `w/` in it, so it must be writable by the sandbox's root.
    Keep(Source),
}

#[derive(Debug)]
pub enum RootPlan {
    /// Host mode: `/` is a fresh tmpfs holding `entries`, made read-only
    /// once everything is mounted into it.
    Tmpfs { entries: Vec<Entry> },
    /// Image / rootfs mode: `/` is a read-only overlay.
    Overlay(OverlayPlan),
}

/// One mount (or creation) inside the new root, in execution order.
#[derive(Debug)]
pub struct MountOp {
    /// Path inside the new root, relative (no leading `/`); "" is the root.
    pub target: CString,
    pub kind: MountKind,
    /// A missing target is skipped instead of failing (masks of /proc
    /// entries that this kernel does not have).
    pub optional: bool,
}

#[derive(Debug)]
pub enum MountKind {
    Bind {
        source: Source,
        attrs: u64,
    },
    /// `owner`: inner uid/gid of the tmpfs root, when not the mounter's.
    Tmpfs {
        size: u64,
        mode: u32,
        owner: Option<(u32, u32)>,
        attrs: u64,
    },
    Proc,
    Sysfs,
    Devpts {
        gid: Option<u32>,
    },
    Mqueue,
    Overlay(OverlayPlan),
    /// A file gets /dev/null bound over it; a directory an empty read-only tmpfs.
    Mask,
    /// Bind the target onto itself read-only (e.g. /proc/sys).
    ReadOnly,
    /// Make an existing mount read-only (non-recursive).
    SetReadOnly,
    /// Create an entry inside an already-mounted writable tmpfs.
    Create(Entry),
    /// Create entries (paths relative to the target directory, parents
    /// first) inside a freshly mounted tmpfs of ours.
    Populate(Vec<Entry>),
}

/// Everything the child needs to build `/`.
#[derive(Debug)]
pub struct MountPlan {
    /// Host-view directory the staging tmpfs covers (in the child's mount
    /// namespace only).
    pub staging: CString,
    /// `<staging>/r`, where the new root is assembled before pivot_root.
    pub root_mountpoint: CString,
    pub root: RootPlan,
    pub ops: Vec<MountOp>,
    /// Absolute path of the workdir inside the root (the command's cwd).
    pub workdir: CString,
    /// What the verdict reports about the root.
    pub report: RootReport,
}

/// The verdict's `isolation.rootfs`. Fields in alphabetical order, as the
/// verdict's keys have always come out.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct RootReport {
    pub layers: usize,
    /// host | rootfs | image
    pub mode: std::borrow::Cow<'static, str>,
    pub read_only: bool,
    pub source: Option<String>,
    pub writable_layer: bool,
}

impl MountPlan {
    /// Every host tree the plan mounts, in execution order.
    pub fn sources(&self) -> impl Iterator<Item = &Source> {
        self.root_sources().chain(self.ops.iter().flat_map(|op| op.sources()))
    }

    /// Lets go of every cloned tree (`Source::forget_tree`).
    pub fn forget_trees(&mut self) {
        if let RootPlan::Overlay(ov) = &mut self.root {
            ov.lowers.iter_mut().for_each(|(_, s)| s.forget_tree());
            if let Some(UpperPlan::Keep(s)) = &mut ov.upper {
                s.forget_tree();
            }
        }
        for op in &mut self.ops {
            match &mut op.kind {
                MountKind::Bind { source, .. } => source.forget_tree(),
                MountKind::Overlay(ov) => ov.lowers.iter_mut().for_each(|(_, s)| s.forget_tree()),
                _ => {}
            }
        }
    }

    /// Drops every bind's idmap (see `Source::fold`): for a backend that
    /// cannot serve idmapped trees.
    pub fn unfold_binds(&mut self) {
        for op in &mut self.ops {
            if let MountKind::Bind { source, .. } = &mut op.kind {
                source.fold = None;
            }
        }
    }

    /// The host trees under the root itself (overlay lower layers).
    pub fn root_sources(&self) -> impl Iterator<Item = &Source> {
        let (root, upper): (&[(CString, Source)], _) = match &self.root {
            RootPlan::Overlay(ov) => (&ov.lowers, ov.upper.as_ref()),
            RootPlan::Tmpfs { .. } => (&[], None),
        };
        let kept = match upper {
            Some(UpperPlan::Keep(s)) => Some(s),
            _ => None,
        };
        root.iter().map(|(_, s)| s).chain(kept)
    }
}

impl MountOp {
    /// The host trees this op mounts.
    pub fn sources(&self) -> Box<dyn Iterator<Item = &Source> + '_> {
        match &self.kind {
            MountKind::Bind { source, .. } => Box::new(std::iter::once(source)),
            MountKind::Overlay(ov) => Box::new(ov.lowers.iter().map(|(_, s)| s)),
            _ => Box::new(std::iter::empty()),
        }
    }
}

/// Builds a CString from a path we validated (no NUL inside).
pub(crate) fn cstring(s: &str) -> CString {
    CString::new(s).expect("validated path contains no NUL byte")
}

/// MOUNT_ATTR_* re-exported for plan builders.
pub mod attrs {
    pub use crate::sys::mount::{MOUNT_ATTR_NODEV as NODEV, MOUNT_ATTR_NOEXEC as NOEXEC};
    pub use crate::sys::mount::{MOUNT_ATTR_NOSUID as NOSUID, MOUNT_ATTR_RDONLY as RDONLY};
}
