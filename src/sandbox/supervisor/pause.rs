//! `husk pause` / `husk resume`: the sandbox's cgroup tree frozen for as
//! long as its owner wants, held here because the supervisor outlives
//! whoever asked (a `husk pause` that exits, or is SIGKILLed, after its
//! answer changes nothing). A pause ends only by `Resume`, `Destroy`, or
//! the sandbox's maximum lifetime.
//!
//! The pause is one holder of the freeze that `husk commit`/`fork` also
//! hold (freeze.rs), so a commit of a paused sandbox neither thaws it
//! when it is done nor is thawed by a resume under way: the tree runs
//! again only when every holder let go.
//!
//! The lease: a paused sandbox does not expire (its TTL is the idle time
//! of a sandbox that could be used, and a paused one is parked on
//! purpose): its record's `expires_ms` becomes the maximum lifetime's end
//! (hold.rs `renew`), and resuming restarts the TTL from then. The maximum
//! lifetime still runs: it is the bound its creator set on the sandbox's
//! whole life, and a pause nobody resumes must not keep its memory
//! pinned forever.
//!
//! An exec into a paused sandbox is refused at once, naming `husk resume`
//! (queued, it would hang for as long as the pause, which has no deadline).
//!
//! Under gVisor (`Live::pause_kind` is `Checkpoint`) a pause is `runsc
//! checkpoint` into `<sandbox dir>/checkpoint` instead: every process of
//! the sandbox is saved with its memory and ends, so a paused gVisor
//! sandbox holds no RAM and no CPU, only the image on disk; the record
//! names the image and its size (`checkpoint`). Resume is `runsc restore`
//! into the same cgroup and root; the processes go on where they were.
//! The lease is as above. It is refused while an exec runs (its `runsc
//! exec` waits on a process the checkpoint ends) or a reader holds a
//! freeze (a frozen sentry cannot save itself). The supervisor keeps the
//! record and the image, so any later husk (or serve) resumes it; if the
//! supervisor itself dies (SIGKILL, a host reboot) the sandbox is gone as
//! any sandbox whose supervisor died: `husk gc` removes its directory,
//! image included, and `husk resume` answers that no such sandbox lives.

use super::{Init, Supervisor};
use crate::backend::PauseKind;
use crate::cgroup::CgroupJoin;
use crate::cgroup::reclaim::{self, ReclaimError};
use crate::sandbox::state::{CheckpointRecord, ProcRef, now_ms};

/// The lease a paused sandbox records when it has no maximum lifetime
/// (which otherwise bounds it): far off, never reached in practice.
pub(super) const PAUSED_LEASE_MS: u64 = 365 * 24 * 3600 * 1000;

#[derive(Debug, thiserror::Error)]
pub(super) enum PauseError {
    #[error(
        "sandbox {0} runs {1} exec(s): pausing a gVisor sandbox checkpoints and ends its processes, which would end them; pause it once they are done"
    )]
    ExecsRunning(String, usize),
    #[error(
        "sandbox {0} is frozen for a reader (husk commit or fork): a frozen gVisor sandbox cannot checkpoint itself; pause it once that is done"
    )]
    Frozen(String),
    #[error("{0}")]
    Checkpoint(String),
    #[error("sandbox {0} is still being created (its --ready-cmd check runs); pause it once husk create has returned")]
    Creating(String),
    #[error("sandbox {0} has no cgroup (--no-cgroup or HUSK_NO_CGROUP), so it cannot be frozen")]
    NoCgroup(String),
    #[error(transparent)]
    Reclaim(#[from] ReclaimError),
    #[error(transparent)]
    Freeze(#[from] super::refusal::Refusal),
    #[error("opening the sandbox's cgroup: {0}")]
    Cgroup(crate::cgroup::CgroupError),
    #[error("restoring sandbox {id} from {}: {why}", .image.display())]
    Restore { id: String, image: std::path::PathBuf, why: String },
    #[error(
        "sandbox {0} runs on the native backend, whose processes husk cannot save: that needs process checkpointing (CRIU), and Debian's CRIU 3.17 fails `criu check` on this kernel (6.13+ changed the vDSO layout); create the sandbox with --runtime runsc to fork it with its memory, or fork its files only (husk fork without --memory)"
    )]
    NativeMemory(String),
    #[error("not a fork tag: {0:?}")]
    BadTag(String),
    #[error("sandbox {0} is paused; `husk resume {0}` first, then fork it")]
    Paused(String),
}

impl Supervisor {
    /// Freezes the sandbox until `resume` (a no-op if it is paused
    /// already); `reclaim`: then pushes its memory out. Returns the bytes
    /// reclaimed. `active`: execs running now.
    pub(super) fn pause(&mut self, reclaim: bool, init: &mut Init, active: usize) -> Result<Option<u64>, PauseError> {
        let id = self.rec.id.clone();
        if self.checking {
            return Err(PauseError::Creating(id));
        }
        if init.pause_kind() == PauseKind::Checkpoint {
            // Nothing of it stays in RAM to push out: `reclaim` is moot.
            return self.checkpoint(init, active).map(|()| None);
        }
        let Some(tree) = self.rec.cgroup.clone() else {
            return Err(PauseError::NoCgroup(id));
        };
        // Refused before anything is frozen: a refusal leaves it running.
        let target = if reclaim { Some(reclaim::target(&tree.dirs)?) } else { None };
        if !self.paused {
            self.join_freeze(&tree.dirs)?;
            self.paused = true;
            self.renew(None);
        }
        Ok(match target {
            Some(dir) => Some(reclaim::reclaim(&dir)?),
            None => None,
        })
    }

    /// `pause` under gVisor: the sandbox saved to its image and ended.
    fn checkpoint(&mut self, init: &mut Init, active: usize) -> Result<(), PauseError> {
        let id = self.rec.id.clone();
        if self.paused {
            return Ok(());
        }
        if active > 0 {
            return Err(PauseError::ExecsRunning(id, active));
        }
        if self.is_frozen() {
            return Err(PauseError::Frozen(id));
        }
        let dir = self.dir.join("checkpoint");
        let saved = init.checkpoint(&self.plan, &dir).map_err(|e| PauseError::Checkpoint(e.message))?;
        self.rec.checkpoint =
            Some(CheckpointRecord { path: saved.dir, bytes: saved.bytes, taken_ms: now_ms(), took_ms: saved.ms });
        self.rec.init = None;
        self.paused = true;
        self.renew(None);
        Ok(())
    }

    /// Lets a paused sandbox run again (a no-op if it is not paused); its
    /// lease restarts from now. Err: a checkpointed sandbox could not be
    /// restored; it stays paused, its image kept (resume may be retried,
    /// or the sandbox removed).
    pub(super) fn resume(&mut self, init: &mut Init) -> Result<(), PauseError> {
        self.resume_keeping(init, false)
    }

    /// `resume`; `keep_image`: the image stays on disk (`save_memory`'s).
    fn resume_keeping(&mut self, init: &mut Init, keep_image: bool) -> Result<(), PauseError> {
        if !self.paused {
            return Ok(());
        }
        if let Some(cp) = self.rec.checkpoint.clone() {
            let leaf = match &self.rec.cgroup {
                Some(tree) => Some(tree.open_leaf("init").map_err(PauseError::Cgroup)?),
                None => None,
            };
            let join = leaf.as_ref().map(|l| l as &dyn CgroupJoin);
            init.restore(&mut self.plan, &cp.path, join).map_err(|e| PauseError::Restore {
                id: self.rec.id.clone(),
                image: cp.path.clone(),
                why: e.message,
            })?;
            self.rec.checkpoint = None;
            self.rec.init = ProcRef::of(init.pid());
            if !keep_image {
                let _ = std::fs::remove_dir_all(&cp.path);
            }
            self.paused = false;
        } else {
            self.paused = false;
            self.release_freeze();
        }
        // From its full TTL: a paused sandbox's lease did not run.
        self.renew(None);
        Ok(())
    }

    /// `husk fork --memory`: a checkpoint into `memfork-<tag>` and at once
    /// a restore from it, so the sandbox runs on (its processes stopped for
    /// the two, about a second; runsc 2022-12's own `--leave-running`
    /// destroys the container and cannot restore it rootless). If the
    /// restore fails the sandbox stays paused on that image, as after
    /// `husk pause` (resume retries).
    pub(super) fn save_memory(
        &mut self,
        init: &mut Init,
        active: usize,
        tag: &str,
    ) -> Result<CheckpointRecord, PauseError> {
        let id = self.rec.id.clone();
        if init.pause_kind() != PauseKind::Checkpoint {
            return Err(PauseError::NativeMemory(id));
        }
        if self.checking {
            return Err(PauseError::Creating(id));
        }
        if !crate::sandbox::state::is_id(tag) {
            return Err(PauseError::BadTag(tag.to_string()));
        }
        if self.paused {
            return Err(PauseError::Paused(id));
        }
        if active > 0 {
            return Err(PauseError::ExecsRunning(id, active));
        }
        if self.is_frozen() {
            return Err(PauseError::Frozen(id));
        }
        let dir = self.dir.join(format!("memfork-{tag}"));
        let saved = match init.checkpoint(&self.plan, &dir) {
            Ok(s) => s,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(PauseError::Checkpoint(e.message));
            }
        };
        let cp = CheckpointRecord { path: saved.dir, bytes: saved.bytes, taken_ms: now_ms(), took_ms: saved.ms };
        self.rec.checkpoint = Some(cp.clone());
        self.rec.init = None;
        self.paused = true;
        self.renew(None);
        // The image stays for the forks: resume must not remove it.
        self.resume_keeping(init, true)?;
        Ok(cp)
    }

    /// Its processes are saved in an image, not running: the init's pid
    /// is not the sandbox's (nothing to watch until the restore).
    pub(super) fn saved(&self) -> bool {
        self.rec.checkpoint.is_some()
    }

    pub(super) fn is_paused(&self) -> bool {
        self.paused
    }
}
