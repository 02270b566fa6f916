//! Freezes asked for by readers of the sandbox's filesystem (`husk
//! commit`, `husk fork`), held here because the supervisor outlives them:
//! a reader SIGKILLed mid-read must not leave the sandbox frozen (and
//! every exec into it stuck) for good. Each holder is one connection
//! with a deadline; the tree is thawed when the last holder lets go
//! (`Thaw`), hangs up, or runs out of time. Execs asked for while frozen
//! wait for the thaw (hold.rs), which the deadlines bound.

use super::Supervisor;
use super::refusal::Refusal;
use crate::cgroup::freeze::{Frozen, freeze};
use crate::sandbox::state::now_ms;

/// The longest a reader may hold a sandbox frozen.
pub(super) const MAX_FREEZE_MS: u64 = 10 * 60 * 1000;

/// The sandbox's frozen tree and how many connections hold it so.
pub(super) struct Held {
    cg: Frozen,
    holders: u32,
}

/// One connection's hold on the freeze.
#[derive(Clone, Copy, Debug)]
pub(super) struct Hold {
    pub until_ms: u64,
}

impl Supervisor {
    /// Freezes (or joins a freeze under way) for at most `for_ms`.
    pub(super) fn hold_freeze(&mut self, for_ms: u64) -> Result<Hold, Refusal> {
        let Some(tree) = &self.rec.cgroup else {
            return Err(Refusal::NoCgroup(self.rec.id.clone()));
        };
        if for_ms == 0 {
            return Err(Refusal::ZeroFreeze);
        }
        let dirs = tree.dirs.clone();
        self.join_freeze(&dirs)?;
        Ok(Hold { until_ms: now_ms() + for_ms.min(MAX_FREEZE_MS) })
    }

    /// One more holder of the freeze (`husk pause` is one, with no
    /// deadline): the first freezes the tree.
    pub(super) fn join_freeze(&mut self, dirs: &[crate::cgroup::Dir]) -> Result<(), Refusal> {
        match &mut self.frozen {
            Some(held) => held.holders += 1,
            None => {
                let cg = freeze(dirs).map_err(|source| Refusal::Freeze { id: self.rec.id.clone(), source })?;
                self.frozen = Some(Held { cg, holders: 1 });
            }
        }
        Ok(())
    }

    /// A holder let go (or hung up, or ran out of time): the last one
    /// thaws the tree.
    pub(super) fn release_freeze(&mut self) {
        let last = match &mut self.frozen {
            Some(held) => {
                held.holders = held.holders.saturating_sub(1);
                held.holders == 0
            }
            None => false,
        };
        if last {
            self.thaw_now();
        }
    }

    /// Thaws whatever holds remain (the sandbox is being torn down).
    pub(super) fn thaw_now(&mut self) {
        if let Some(held) = self.frozen.take()
            && let Err(e) = held.cg.thaw()
        {
            self.rec.error = Some(format!("thawing the sandbox's cgroup: {e}"));
        }
    }

    pub(super) fn is_frozen(&self) -> bool {
        self.frozen.is_some()
    }
}
