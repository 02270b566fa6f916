//! Holding a sandbox still while something reads its filesystem (`husk
//! commit`, `husk fork`): every process of its cgroup tree is frozen, so
//! no write lands while the tree is walked. v2: `cgroup.freeze` on the
//! sandbox's unified cgroup; v1 (this hybrid host's layout): the freezer
//! hierarchy's `freezer.state`. Both freeze descendants (exec leaves) too.
//!
//! A freeze is held by the sandbox's supervisor, never by the reader: a
//! reader can be SIGKILLed mid-read, and a freeze nobody lifts leaves the
//! sandbox (and every exec into it) stopped for good. The supervisor
//! thaws when the reader's connection closes or its deadline passes
//! (supervisor/freeze.rs).

use super::{CgroupError, Dir, fs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a freeze may take to settle before it is reported as failed
/// (a task in an uninterruptible sleep delays it).
const SETTLE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum FreezeError {
    #[error(
        "the sandbox has no freezable cgroup (no unified cgroup and no v1 freezer); its files cannot be read consistently"
    )]
    NoFreezer,
    #[error("{} did not report frozen within {}s", path.display(), SETTLE.as_secs())]
    NotSettled { path: PathBuf },
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
}

/// A frozen cgroup; thawed by `thaw`, or on drop (the supervisor's
/// teardown exits without running drops, so it thaws explicitly).
pub struct Frozen {
    dir: PathBuf,
    unified: bool,
    thawed: bool,
}

/// Freezes the sandbox whose cgroups are `dirs` and waits until the
/// kernel says every member is frozen.
pub fn freeze(dirs: &[Dir]) -> Result<Frozen, FreezeError> {
    let d = dirs
        .iter()
        .find(|d| d.unified)
        .or_else(|| dirs.iter().find(|d| d.controllers.iter().any(|c| c == "freezer")))
        .ok_or(FreezeError::NoFreezer)?;
    let frozen = Frozen { dir: d.path.clone(), unified: d.unified, thawed: false };
    if d.unified {
        fs::write(&d.path, "cgroup.freeze", "1")?;
    } else {
        fs::write(&d.path, "freezer.state", "FROZEN")?;
    }
    let start = Instant::now();
    loop {
        let settled = if frozen.unified {
            fs::read_opt(&frozen.dir, "cgroup.events").and_then(|t| fs::keyed(&t, "frozen")) == Some(1)
        } else {
            fs::read_opt(&frozen.dir, "freezer.state").is_some_and(|s| s.trim() == "FROZEN")
        };
        if settled {
            return Ok(frozen);
        }
        if start.elapsed() > SETTLE {
            return Err(FreezeError::NotSettled { path: frozen.dir.clone() });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl Frozen {
    /// Lets the cgroup run again.
    pub fn thaw(mut self) -> Result<(), CgroupError> {
        self.thawed = true;
        self.write_thawed()
    }

    fn write_thawed(&self) -> Result<(), CgroupError> {
        if self.unified {
            fs::write(&self.dir, "cgroup.freeze", "0")
        } else {
            fs::write(&self.dir, "freezer.state", "THAWED")
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if !self.thawed {
            let _ = self.write_thawed();
        }
    }
}
