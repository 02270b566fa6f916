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

use super::Supervisor;
use crate::cgroup::reclaim::{self, ReclaimError};

/// The lease a paused sandbox records when it has no maximum lifetime
/// (which otherwise bounds it): far off, never reached in practice.
pub(super) const PAUSED_LEASE_MS: u64 = 365 * 24 * 3600 * 1000;

#[derive(Debug, thiserror::Error)]
pub(super) enum PauseError {
    #[error(
        "not yet supported under runsc: pausing a gVisor sandbox needs runsc checkpoint/restore, which husk does not do yet; sandbox {0} keeps running"
    )]
    Runsc(String),
    #[error("sandbox {0} is still being created (its --ready-cmd check runs); pause it once husk create has returned")]
    Creating(String),
    #[error("sandbox {0} has no cgroup (--no-cgroup or HUSK_NO_CGROUP), so it cannot be frozen")]
    NoCgroup(String),
    #[error(transparent)]
    Reclaim(#[from] ReclaimError),
    #[error(transparent)]
    Freeze(#[from] super::refusal::Refusal),
}

impl Supervisor {
    /// Freezes the sandbox until `resume` (a no-op if it is paused
    /// already); `reclaim`: then pushes its memory out. Returns the bytes
    /// reclaimed.
    pub(super) fn pause(&mut self, reclaim: bool) -> Result<Option<u64>, PauseError> {
        let id = self.rec.id.clone();
        if self.backend.name() == "runsc" {
            return Err(PauseError::Runsc(id));
        }
        if self.checking {
            return Err(PauseError::Creating(id));
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

    /// Lets a paused sandbox run again (a no-op if it is not paused); its
    /// lease restarts from now.
    pub(super) fn resume(&mut self) {
        if std::mem::take(&mut self.paused) {
            self.release_freeze();
            // From its full TTL: a paused sandbox's lease did not run.
            self.renew(None);
        }
    }

    pub(super) fn is_paused(&self) -> bool {
        self.paused
    }
}
