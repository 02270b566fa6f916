//! `pause` / `resume`: every process of the container stopped by the
//! cgroup freezer and let go again. v1 (this hybrid host, and what the
//! engines use on it): the freezer controller's `freezer.state`; pure v2:
//! `cgroup.freeze`, confirmed by `cgroup.events`. A freeze is asynchronous
//! (v1 passes through FREEZING while tasks reach the refrigerator), so the
//! verb returns only once the kernel says FROZEN: "paused" must mean that
//! nothing in the container runs. A freeze that does not complete is undone
//! and reported, never left half-done.

use super::OciError;
use super::state::{Status, Store};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a freeze may take before it is undone: a task in an
/// uninterruptible sleep (NFS, a stuck disk) keeps v1 in FREEZING.
const FREEZE_PATIENCE: Duration = Duration::from_secs(10);

/// The container's freezer: which file to write and how to read it back.
enum Freezer {
    V1(PathBuf),
    V2(PathBuf),
}

impl Freezer {
    fn of(cgroups: &std::collections::BTreeMap<String, PathBuf>, id: &str) -> Result<Freezer, OciError> {
        if let Some(d) = cgroups.get("freezer") {
            return Ok(Freezer::V1(d.clone()));
        }
        if let Some(d) = cgroups.get("") {
            return Ok(Freezer::V2(d.clone()));
        }
        Err(OciError::Refused(format!(
            "container {id} has no freezer cgroup (the host mounts no v1 freezer controller and no cgroup v2): \
             pause needs one"
        )))
    }

    fn set(&self, frozen: bool) -> Result<(), OciError> {
        let (path, value) = match self {
            Freezer::V1(d) => (d.join("freezer.state"), if frozen { "FROZEN" } else { "THAWED" }),
            Freezer::V2(d) => (d.join("cgroup.freeze"), if frozen { "1" } else { "0" }),
        };
        std::fs::write(&path, value).map_err(|e| OciError::io(format!("writing {value} to {}", path.display()), e))
    }

    /// Whether the kernel has finished: v1 reads FROZEN (not FREEZING),
    /// v2 `frozen 1` in cgroup.events.
    fn is(&self, frozen: bool) -> Result<bool, OciError> {
        let read =
            |p: &Path| crate::files::read_text(p).map_err(|e| OciError::io(format!("reading {}", p.display()), e));
        Ok(match self {
            Freezer::V1(d) => {
                let s = read(&d.join("freezer.state"))?;
                s.trim() == if frozen { "FROZEN" } else { "THAWED" }
            }
            Freezer::V2(d) => {
                let s = read(&d.join("cgroup.events"))?;
                s.lines().any(|l| l == if frozen { "frozen 1" } else { "frozen 0" })
            }
        })
    }

    fn wait(&self, frozen: bool) -> Result<bool, OciError> {
        let start = Instant::now();
        loop {
            if self.is(frozen)? {
                return Ok(true);
            }
            if start.elapsed() > FREEZE_PATIENCE {
                return Ok(false);
            }
            // v1 re-walks the tasks on each write of FROZEN.
            if frozen && matches!(self, Freezer::V1(_)) {
                self.set(true)?;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

pub fn pause(store: &Store, id: &str) -> Result<(), OciError> {
    let _lock = store.lock(id)?;
    let record = store.load(id)?;
    match record.status(store) {
        Status::Running | Status::Created => {}
        Status::Paused => return Ok(()),
        _ => return Err(OciError::NotRunning),
    }
    let freezer = Freezer::of(&record.cgroups, id)?;
    freezer.set(true)?;
    if !freezer.wait(true)? {
        let _ = freezer.set(false);
        return Err(OciError::Refused(format!(
            "container {id}: the freezer did not reach FROZEN in {}s (a task in uninterruptible sleep?); thawed again",
            FREEZE_PATIENCE.as_secs()
        )));
    }
    Ok(())
}

pub fn resume(store: &Store, id: &str) -> Result<(), OciError> {
    let _lock = store.lock(id)?;
    let record = store.load(id)?;
    if record.status(store) != Status::Paused {
        return Err(OciError::Refused("container not paused".into()));
    }
    let freezer = Freezer::of(&record.cgroups, id)?;
    freezer.set(false)?;
    if !freezer.wait(false)? {
        return Err(OciError::Refused(format!("container {id}: the freezer did not thaw")));
    }
    Ok(())
}
