//! What is left of a sandbox once it is gone: a small record,
//! `<state>/sandboxes/tombstones/<id>`, saying how and when it ended, so
//! an exec on an expired or removed sandbox says so instead of the "no
//! sandbox" of a typo'd id. Bounded: at most `MAX_COUNT` of them, none
//! older than `MAX_AGE` (pruned on every write and by `husk gc`).

use super::SandboxError;
use super::state::{Store, is_id, now_ms};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Tombstones kept at most (the oldest go first).
pub const MAX_COUNT: usize = 256;
/// Tombstones older than this go.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// How a sandbox ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// Its lease (`--ttl`) ran out without an exec or renew.
    Expired,
    /// It reached `--max-lifetime`.
    MaxLifetime,
    /// `husk rm`, or a signal to its supervisor.
    Removed,
    /// Its supervisor died; a sweep (`husk gc`, the next command) removed
    /// what remained.
    Swept,
    /// Setup failed, or its init died on its own.
    Failed,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Tombstone {
    pub id: String,
    pub name: Option<String>,
    pub ending: Ending,
    /// Unix time, milliseconds.
    pub at_ms: u64,
    pub why: Option<String>,
}

impl Tombstone {
    /// What an exec (or rm, renew, inspect) on the ended sandbox says.
    pub fn error(&self) -> SandboxError {
        let at = crate::units::format_utc_ms(self.at_ms);
        let how = match self.ending {
            Ending::Expired | Ending::MaxLifetime => format!("expired at {at}"),
            Ending::Removed | Ending::Swept => format!("was removed at {at}"),
            Ending::Failed => format!("failed at {at}"),
        };
        let name = self.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
        let why = self.why.as_deref().map(|w| format!(": {w}")).unwrap_or_default();
        SandboxError::Ended { id: self.id.clone(), what: format!("{name} {how}{why}; create a new one") }
    }
}

fn dir(store: &Store) -> PathBuf {
    store.root.join("tombstones")
}

/// Records how sandbox `id` ended (best effort: the sandbox is gone
/// either way), then prunes to the bounds.
pub fn write(store: &Store, t: &Tombstone) {
    let d = dir(store);
    let _ = std::fs::DirBuilder::new().mode(0o700).recursive(true).create(&d);
    let Ok(data) = serde_json::to_vec(t) else { return };
    let tmp = d.join(format!(".{}.{}", t.id, std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&data))
        .and_then(|()| std::fs::rename(&tmp, d.join(&t.id)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    prune(store);
}

/// Removes tombstones past `MAX_AGE`, then the oldest beyond `MAX_COUNT`;
/// returns how many went.
pub fn prune(store: &Store) -> usize {
    let Ok(it) = std::fs::read_dir(dir(store)) else { return 0 };
    let now = SystemTime::now();
    let mut all: Vec<(SystemTime, PathBuf)> = it
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(is_id))
        .map(|e| (e.metadata().and_then(|m| m.modified()).unwrap_or(now), e.path()))
        .collect();
    all.sort();
    let excess = all.len().saturating_sub(MAX_COUNT);
    let mut removed = 0;
    for (i, (when, path)) in all.iter().enumerate() {
        let old = now.duration_since(*when).unwrap_or_default() > MAX_AGE;
        if (i < excess || old) && std::fs::remove_file(path).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn read(path: &std::path::Path) -> Option<Tombstone> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The tombstone of what `what` named (an id, a name, a unique id prefix
/// of 3+ digits), if it ended recently; for a name, its latest sandbox.
pub fn find(store: &Store, what: &str) -> Option<Tombstone> {
    let d = dir(store);
    if is_id(what) {
        return read(&d.join(what));
    }
    let all: Vec<Tombstone> = std::fs::read_dir(&d)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(is_id))
        .filter_map(|e| read(&e.path()))
        .collect();
    if let Some(t) = all.iter().filter(|t| t.name.as_deref() == Some(what)).max_by_key(|t| t.at_ms) {
        return Some(t.clone());
    }
    let prefix = what.len() >= 3 && what.bytes().all(|b| b.is_ascii_hexdigit());
    let mut hits = all.into_iter().filter(|t| prefix && t.id.starts_with(what));
    match (hits.next(), hits.next()) {
        (Some(t), None) => Some(t),
        _ => None,
    }
}

/// A tombstone for sandbox `id`, ended now.
pub fn now(id: &str, name: Option<String>, ending: Ending, why: Option<String>) -> Tombstone {
    Tombstone { id: id.to_string(), name, ending, at_ms: now_ms(), why }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tombstones_are_found_by_id_name_and_prefix_and_bounded() {
        let t = std::env::temp_dir().join(format!("husk-tombstones-{}", std::process::id()));
        let store = Store::open(&t).unwrap();
        let a = now("7d44c0ffee12", Some("task-42".into()), Ending::Expired, Some("lease of 10m".into()));
        write(&store, &a);
        assert_eq!(find(&store, "7d44c0ffee12"), Some(a.clone()));
        assert_eq!(find(&store, "task-42"), Some(a.clone()));
        assert_eq!(find(&store, "7d44"), Some(a.clone()));
        assert_eq!(find(&store, "0123456789ab"), None);
        let msg = a.error().to_string();
        assert!(msg.starts_with("sandbox 7d44c0ffee12 (task-42) expired at ") && msg.contains("UTC"), "{msg}");
        for i in 0..MAX_COUNT + 10 {
            write(&store, &now(&format!("{i:012x}"), None, Ending::Removed, None));
        }
        let count = || std::fs::read_dir(dir(&store)).unwrap().count();
        assert_eq!(count(), MAX_COUNT);
        // Age: one set far in the past goes at the next prune.
        let victim = std::fs::read_dir(dir(&store)).unwrap().flatten().next().unwrap().path();
        let old = SystemTime::now() - MAX_AGE - Duration::from_secs(60);
        std::fs::File::options().write(true).open(&victim).unwrap().set_modified(old).unwrap();
        assert_eq!(prune(&store), 1);
        assert!(!victim.exists());
        std::fs::remove_dir_all(&t).unwrap();
    }
}
