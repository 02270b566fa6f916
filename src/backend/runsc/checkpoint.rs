//! A gVisor sandbox's memory state: `runsc checkpoint` saves every process
//! of the sandbox (its memory, open files, the sentry's tmpfs mounts such
//! as /tmp) into one image file, and `runsc restore` boots a new sentry
//! from it. husk's `pause` under runsc is a checkpoint that ends the
//! sandbox's processes (the memory is on disk then, not pinned in RAM), and
//! `resume` a restore into the same cgroup, bundle and root.
//!
//! What restore needs (found by trying Debian's runsc 2022-12): the same
//! container id (its old state deleted first), the same bundle and the
//! same mounts at the same paths, which is why the restore goes through the
//! same launch as `runsc run --detach` (`live::start_as` with
//! `prepare::Invocation::Restore`): husk stages the root again in a new
//! mount namespace of runsc's child. What a checkpoint cannot carry is a
//! tmpfs that lives in that mount namespace rather than in the sentry: the
//! root's writable layer (`--writable`) is one, so such a sandbox is not
//! paused this way (`unsupported`), never silently restored without its
//! files.

use super::config::RunscConfig;
use super::{Ctl, CtlError};
use crate::plan::Plan;
use crate::spec::NetworkMode;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The file runsc writes in `--image-path`.
pub const IMAGE_FILE: &str = "checkpoint.img";

/// A saved image.
#[derive(Clone, Debug)]
pub struct Saved {
    /// The directory given to `--image-path`.
    pub dir: PathBuf,
    /// The image file's size.
    pub bytes: u64,
    /// How long `runsc checkpoint` took.
    pub ms: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("creating the checkpoint directory {}: {source}", path.display())]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("checkpointing gVisor sandbox {id}: {err}")]
    Runsc { id: String, err: CtlError },
    #[error("runsc checkpoint of sandbox {id} wrote no image at {}", path.display())]
    NoImage { id: String, path: PathBuf },
    #[error(
        "sandbox {id} has a writable layer over image files at {at} (--writable, or a workdir inside the image): it is a tmpfs in runsc's mount namespace, which a checkpoint cannot carry; create it without --writable and with --workdir outside the image's files (write to /tmp, gVisor's own tmpfs, or a :rw bind) to pause or fork it with its memory"
    )]
    WritableLayer { id: String, at: String },
    #[error("no checkpoint image at {}: {source}", path.display())]
    Missing { path: PathBuf, source: std::io::Error },
}

/// Why the sandbox `plan` describes cannot be checkpointed, if it cannot.
pub fn unsupported(plan: &Plan) -> Option<CheckpointError> {
    use crate::rootfs::{MountKind, RootPlan};
    let layer = |at: String| CheckpointError::WritableLayer { id: plan.id.clone(), at };
    if let RootPlan::Overlay(ov) = &plan.mounts.root
        && ov.upper.is_some()
    {
        return Some(layer("/".into()));
    }
    plan.mounts.ops.iter().find_map(|op| match &op.kind {
        MountKind::Overlay(ov) if ov.upper.is_some() => Some(layer(format!("/{}", op.target.to_string_lossy()))),
        _ => None,
    })
}

/// `runsc checkpoint --image-path DIR ID`: the sentry exits once the
/// image is written; reaping it is the caller's. (runsc 2022-12's
/// `--leave-running` destroys the container and restores it, which fails
/// rootless and leaves nothing: a caller that wants the sandbox to run on
/// restores it itself.)
pub fn save(cfg: &RunscConfig, network: NetworkMode, id: &str, dir: &Path) -> Result<Saved, CheckpointError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|source| CheckpointError::Dir { path: dir.to_path_buf(), source })?;
    let image = dir.join(IMAGE_FILE);
    // A stale image from an earlier pause must not be taken for this one.
    let _ = std::fs::remove_file(&image);
    let ctl = Ctl { cfg, network, id };
    let path = dir.display().to_string();
    let t = Instant::now();
    ctl.runsc(&["checkpoint", "--image-path", &path, id])
        .map_err(|err| CheckpointError::Runsc { id: id.into(), err })?;
    let ms = t.elapsed().as_millis() as u64;
    let bytes =
        std::fs::metadata(&image).map_err(|_| CheckpointError::NoImage { id: id.into(), path: image.clone() })?.len();
    Ok(Saved { dir: dir.to_path_buf(), bytes, ms })
}

/// The image in `dir`, checked before a restore is attempted (runsc's own
/// error for a missing file is a Go stack of little help).
pub fn image_of(dir: &Path) -> Result<PathBuf, CheckpointError> {
    let image = dir.join(IMAGE_FILE);
    std::fs::metadata(&image).map_err(|source| CheckpointError::Missing { path: image.clone(), source })?;
    Ok(image)
}
