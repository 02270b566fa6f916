//! `husk gc` for the runtime mode's state (`--root` of `husk oci`, the
//! roots dockerd and containerd's shim pass): what a caller that died
//! before its `delete` left behind. A container whose init is dead
//! ("stopped"), or whose create died before init was recorded
//! ("creating"), is deleted as `delete` would (its processes killed, the
//! cgroups create made removed, poststop hooks run, the state removed),
//! once its state is older than `min_age` (a create may be in progress).
//! Running, created and paused containers are never touched: their engine
//! owns them. Then the parent cgroups husk recorded for the root (e.g.
//! /docker) go if they are empty.

use super::state::{Status, Store};
use super::{DeleteArgs, OciError, lifecycle};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Serialize, Debug, Default)]
pub struct OciGcReport {
    /// The state roots looked at (those that exist).
    pub roots: Vec<String>,
    /// root/id of each container deleted.
    pub removed: Vec<String>,
    /// Containers left because their engine still owns them.
    pub live: usize,
    /// Stopped containers left because their state is younger than min_age.
    pub young: usize,
    /// Empty parent cgroups husk had made for a root.
    pub cgroup_parents_removed: Vec<String>,
    pub errors: Vec<String>,
}

/// Sweeps each root that exists (a missing one is not created).
pub fn gc(roots: &[PathBuf], min_age: Duration) -> OciGcReport {
    let mut report = OciGcReport::default();
    let mut seen: Vec<PathBuf> = Vec::new();
    for root in roots {
        if seen.contains(root) {
            continue;
        }
        seen.push(root.clone());
        let Some(store) = Store::existing(root) else { continue };
        report.roots.push(root.display().to_string());
        for id in store.ids() {
            match sweep_one(&store, &id, min_age) {
                Ok(Swept::Removed) => report.removed.push(format!("{}/{id}", root.display())),
                Ok(Swept::Live) => report.live += 1,
                Ok(Swept::Young) => report.young += 1,
                Err(e) => report.errors.push(format!("{}/{id}: {e}", root.display())),
            }
        }
        match store.sweep_parents() {
            Ok(gone) => report.cgroup_parents_removed.extend(gone.iter().map(|p| p.display().to_string())),
            Err(e) => report.errors.push(format!("{}: parent cgroups: {e}", root.display())),
        }
    }
    report
}

enum Swept {
    Removed,
    Live,
    Young,
}

fn sweep_one(store: &Store, id: &str, min_age: Duration) -> Result<Swept, OciError> {
    let record = store.load(id)?;
    if !matches!(record.status(store), Status::Stopped | Status::Creating) {
        return Ok(Swept::Live);
    }
    let age = std::fs::metadata(store.dir(id).join("state.json"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default();
    if age < min_age {
        return Ok(Swept::Young);
    }
    // Not forced: a container that started meanwhile is refused, not killed.
    lifecycle::delete(store, &DeleteArgs { force: false, id: id.to_string() })?;
    Ok(Swept::Removed)
}
