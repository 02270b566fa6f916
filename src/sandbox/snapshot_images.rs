//! The state dir's records of the snapshot images `husk fork` (and `husk
//! create --from-snapshot`) made, `<state>/sandboxes/snapshots/<source
//! id>:<tag>`, and the sweep `husk gc` runs over them. A record is locked
//! while its fork runs and says `handed-over` once the forks' ids reached
//! the caller. The sweep removes the image of a record nobody holds when
//! its forks were never handed over (the fork was killed or failed), or its
//! source is gone; either way only once no sandbox runs on it. Only this
//! state dir's snapshots are touched: another state dir sharing the image
//! store has its own records.

use super::SandboxError;
use super::state::{self, Store};
use crate::image::Store as Images;

/// One snapshot image's record, held (locked) while its fork runs.
pub struct Pending {
    file: nix::fcntl::Flock<std::fs::File>,
}

/// What a snapshot record says once its forks were handed over.
const HANDED_OVER: &[u8] = b"handed-over\n";

fn snapshots_dir(sandboxes: &Store) -> std::path::PathBuf {
    sandboxes.root.join("snapshots")
}

/// The image name of the snapshot `tag` of sandbox `source`.
pub fn image_name(source: &str, tag: &str) -> String {
    format!("snapshot/{source}:{tag}")
}

impl Pending {
    /// Records (and locks) the snapshot `tag` of `source` before its image
    /// is stored, so a fork killed halfway leaves a record `gc` finds.
    pub fn start(sandboxes: &Store, source: &str, tag: &str) -> Result<Pending, SandboxError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = snapshots_dir(sandboxes);
        let io = |e: std::io::Error, p: &std::path::Path| {
            SandboxError::State(format!("recording the snapshot in {}: {e}", p.display()))
        };
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io(e, &dir)),
            _ => {}
        }
        let path = dir.join(format!("{source}:{tag}"));
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| io(e, &path))?;
        let file = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| io(std::io::Error::from(e), &path))?;
        Ok(Pending { file })
    }

    /// The forks reached their caller: the image stays while its source lives.
    pub fn handed_over(self) {
        use std::io::Write;
        let _ = (&*self.file).write_all(HANDED_OVER);
    }
}

/// What `husk gc` did with this state dir's snapshot images.
#[derive(serde::Serialize, Debug, Default)]
pub struct SnapshotSweep {
    pub removed: Vec<String>,
    /// Kept: a fork of it is under way, its source lives (and it was
    /// handed over), or a sandbox runs on it; with why.
    pub kept: Vec<String>,
    pub errors: Vec<String>,
}

/// `husk gc`: this state dir's snapshot images nobody needs any more.
pub fn sweep(images: &Images, sandboxes: &Store) -> SnapshotSweep {
    let mut out = SnapshotSweep::default();
    let Ok(entries) = std::fs::read_dir(snapshots_dir(sandboxes)) else { return out };
    for e in entries.flatten() {
        let key = e.file_name().to_string_lossy().into_owned();
        let Some((source, tag)) = key.split_once(':') else { continue };
        if !state::is_id(source) || tag.is_empty() || !tag.bytes().all(|b| b.is_ascii_alphanumeric()) {
            continue;
        }
        let name = image_name(source, tag);
        let Ok(f) = std::fs::OpenOptions::new().read(true).write(true).open(e.path()) else { continue };
        let Ok(lock) = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) else {
            out.kept.push(format!("{name}: a fork of it is under way"));
            continue;
        };
        let handed_over = std::fs::read(e.path()).is_ok_and(|b| b == HANDED_OVER);
        if handed_over && sandboxes.dir(source).is_dir() {
            out.kept.push(format!("{name}: its source sandbox {source} lives"));
            continue;
        }
        match images.remove(&name) {
            Ok(_) => {
                let _ = std::fs::remove_file(e.path());
                out.removed.push(name);
            }
            // Its fork ended before storing it, or it was removed by hand.
            Err(crate::image::ImageError::NotFound(_)) => {
                let _ = std::fs::remove_file(e.path());
            }
            Err(crate::image::ImageError::InUse(_)) => out.kept.push(format!("{name}: a sandbox runs on it")),
            Err(err) => out.errors.push(format!("removing {name}: {err}")),
        }
        drop(lock);
    }
    out
}
