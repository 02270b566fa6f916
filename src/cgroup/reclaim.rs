//! Pushing a paused sandbox's memory out (`husk pause --memory-reclaim`):
//! cgroup v2's `memory.reclaim` asks the kernel to reclaim the cgroup's
//! pages (to swap or by dropping clean page cache) while its processes
//! keep their memory; it comes back on the next touch. cgroup v1 has no
//! such file: `memory.force_empty` works only on a cgroup with no tasks,
//! and lowering `memory.limit_in_bytes` would OOM-kill what does not fit,
//! so on a v1 memory controller (this hybrid host's layout) the option is
//! refused before anything is frozen.

use super::{Dir, fs};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ReclaimError {
    #[error(
        "--memory-reclaim needs cgroup v2's memory.reclaim, and this sandbox's memory controller is on cgroup v1, which has no way to push a live cgroup's memory out (memory.force_empty needs the cgroup empty; a lower limit would OOM-kill); pause without --memory-reclaim"
    )]
    V1Only,
    #[error("reclaiming memory through {}: {why}", path.display())]
    Failed { path: PathBuf, why: String },
}

/// The unified cgroup whose memory can be reclaimed, checked before the
/// pause so a refusal leaves the sandbox running.
pub fn target(dirs: &[Dir]) -> Result<PathBuf, ReclaimError> {
    dirs.iter()
        .find(|d| d.unified && d.path.join("memory.reclaim").exists())
        .map(|d| d.path.clone())
        .ok_or(ReclaimError::V1Only)
}

/// Asks the kernel to reclaim all of `dir`'s memory; returns the bytes it
/// let go of. The kernel answers EAGAIN when it reclaimed less than asked
/// (pages it could not write out, no swap): that is not a failure.
pub fn reclaim(dir: &std::path::Path) -> Result<u64, ReclaimError> {
    let current = || fs::read_opt(dir, "memory.current").and_then(|s| s.trim().parse::<u64>().ok());
    let before = current().unwrap_or(0);
    if before > 0
        && let Err(e) = std::fs::write(dir.join("memory.reclaim"), before.to_string())
        && e.raw_os_error() != Some(libc::EAGAIN)
    {
        return Err(ReclaimError::Failed { path: dir.join("memory.reclaim"), why: e.to_string() });
    }
    Ok(before.saturating_sub(current().unwrap_or(before)))
}
