//! What happened in a sandbox beyond its execs' own accounting: OOM kills
//! and pids-limit hits anywhere in it (a background process an earlier
//! exec left, the init), lease renewals and execs. The supervisor keeps a
//! bounded journal: the newest `KEEP` go into the record (`husk inspect`),
//! and an exec asks, before it ends, for the ones that happened while it
//! ran (its verdict's `events`).
//!
//! The kernel's counters are sampled, not watched: on every request the
//! supervisor serves and at least once a minute while idle, so an event's
//! `at_ms` is when the supervisor noticed it, no later than the next husk
//! command on the sandbox.

use crate::cgroup::nested::{Incidents, Tree};
use serde::{Deserialize, Serialize};

/// Events kept (in the record, and at most in one reply).
pub const KEEP: usize = 24;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Increasing within the sandbox.
    pub seq: u64,
    /// Unix time, milliseconds (when the supervisor noticed it).
    pub at_ms: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// Processes of the sandbox the kernel OOM-killed since the last event.
    OomKill { count: u64 },
    /// Forks refused at the sandbox's `--pids` limit since the last event.
    PidsLimit { count: u64 },
    /// `husk renew`: the lease now ends at `expires_ms`.
    Renew { ttl_ms: u64, expires_ms: u64 },
    /// An exec started (its number in the sandbox).
    Exec { exec: u64 },
}

/// The supervisor's journal.
#[derive(Default)]
pub struct Journal {
    events: Vec<Event>,
    next: u64,
    seen: Incidents,
}

impl Journal {
    /// Starts from what the record already holds and the counters as they
    /// are now (nothing before the sandbox was READY is an event of it).
    pub fn new(tree: Option<&Tree>) -> Journal {
        Journal { events: Vec::new(), next: 1, seen: tree.map(Tree::incidents).unwrap_or_default() }
    }

    /// Records `kind` now; its sequence number.
    pub fn record(&mut self, kind: EventKind) -> u64 {
        let seq = self.next;
        self.next += 1;
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        self.events.push(Event { seq, at_ms, kind });
        if self.events.len() > KEEP {
            self.events.remove(0);
        }
        seq
    }

    /// Reads the sandbox's counters and records what went up; true if
    /// anything did.
    pub fn sample(&mut self, tree: Option<&Tree>) -> bool {
        let Some(tree) = tree else { return false };
        let now = tree.incidents();
        let mut changed = false;
        if now.oom_kills > self.seen.oom_kills {
            self.record(EventKind::OomKill { count: now.oom_kills - self.seen.oom_kills });
            changed = true;
        }
        if now.pids_limit_hits > self.seen.pids_limit_hits {
            self.record(EventKind::PidsLimit { count: now.pids_limit_hits - self.seen.pids_limit_hits });
            changed = true;
        }
        self.seen = now;
        changed
    }

    /// After a leaf was removed: its counts are gone from the sums (v1), so
    /// a lower value is no event and the next rise counts from here.
    pub fn rebase(&mut self, tree: Option<&Tree>) {
        if let Some(t) = tree {
            self.seen = t.incidents();
        }
    }

    /// The events after `seq`.
    pub fn since(&self, seq: u64) -> Vec<Event> {
        self.events.iter().filter(|e| e.seq > seq).cloned().collect()
    }

    /// The newest events, for the record.
    pub fn recent(&self) -> Vec<Event> {
        self.events.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_is_bounded_and_answers_since() {
        let mut j = Journal::new(None);
        let first = j.record(EventKind::Exec { exec: 1 });
        j.record(EventKind::OomKill { count: 2 });
        assert_eq!(j.since(first).len(), 1);
        assert_eq!(j.since(first)[0].kind, EventKind::OomKill { count: 2 });
        for i in 0..100 {
            j.record(EventKind::Exec { exec: i });
        }
        assert_eq!(j.recent().len(), KEEP);
        let v = serde_json::to_value(&j.recent()[0]).unwrap();
        assert_eq!(v["kind"], "exec", "{v}");
        assert!(v["at_ms"].as_u64().is_some() && v["seq"].as_u64().is_some(), "{v}");
    }
}
