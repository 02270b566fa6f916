//! What sandboxes leave when their supervisor dies without cleaning up
//! (SIGKILL, OOM kill, a crash): the state directory, the name, the cgroups,
//! and in the worst case an init that outlived PDEATHSIG. The supervisor's
//! lock says who is dead: a lock anyone can take has no holder left.
//!
//! `sweep` (every sandbox command runs it) removes only sandboxes whose
//! supervisor is gone; `husk gc` also ends supervisors that let their lease
//! expire without acting (stopped, say), and removes sandbox cgroups no
//! state refers to.

use super::state::{self, ProcRef, Store, now_ms};
use super::supervisor::COMM;
use crate::cgroup::nested;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// A supervisor whose lease ran out this long ago without it acting is
/// considered stuck.
const STUCK_AFTER_MS: u64 = 10_000;

/// A `.<id>.new` directory older than this, and unlocked, is a creation
/// that died.
const ABANDONED_AFTER: Duration = Duration::from_secs(60);

#[derive(Serialize, Debug, Default, Clone, PartialEq, Eq)]
pub struct SandboxGcReport {
    /// Sandboxes removed (their supervisor was gone).
    pub removed: Vec<String>,
    /// Of those, the ones whose lease had expired with the supervisor stuck.
    pub expired: Vec<String>,
    /// Processes killed: stuck supervisors, inits that outlived theirs.
    pub killed: Vec<i32>,
    /// Sandboxes left alone: alive and within their lease.
    pub live: Vec<String>,
    /// Sandbox cgroups no state refers to, removed.
    pub cgroups: Vec<String>,
    /// Empty sandbox cgroups of sandboxes this state dir has no record of
    /// (another state dir's, or ended before its tombstones were pruned):
    /// left alone (docs/cgroups.md, "Who removes what").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups_left: Vec<String>,
    /// Sandboxes of this state directory whose supervisor still ran while
    /// their record was gone (deleted under them): ended, and also in
    /// `removed`.
    pub unrecorded: Vec<String>,
    /// Tombstones of ended sandboxes past their bounds, removed.
    pub tombstones_pruned: usize,
    pub errors: Vec<String>,
}

/// Removes the sandbox `id` if its supervisor is gone; returns the pids it
/// had to kill, or `None` if the sandbox is alive.
pub fn sweep_one(store: &Store, id: &str) -> Option<Result<Vec<i32>, String>> {
    let dir = store.dir(id);
    let lock = match state::try_lock(&dir) {
        Ok(Some(l)) => l,
        Ok(None) => return None,
        // Removed meanwhile (by its supervisor, or another sweeper).
        Err(_) if !dir.exists() => return Some(Ok(Vec::new())),
        Err(e) => return Some(Err(e.to_string())),
    };
    let mut killed = Vec::new();
    let rec = state::read_record(&dir).ok();
    if let Some(rec) = &rec {
        // What the backend's sandbox keeps running without its supervisor
        // (a gVisor sandbox: runsc gives a detached sandbox no death signal).
        let (reaped, errors) = crate::backend::reap_orphan(&rec.backend, &store.state_dir(), id, &rec.spec);
        killed.extend(reaped);
        if !errors.is_empty() {
            return Some(Err(format!("sandbox {id}: {}", errors.join("; "))));
        }
        // PDEATHSIG normally took the init with its supervisor.
        if let Some(init) = rec.init
            && kill_and_wait(init)
        {
            killed.push(init.pid);
        }
        if let Some(tree) = &rec.cgroup
            && let Err(e) = tree.remove()
        {
            return Some(Err(format!("sandbox {id}: {e}")));
        }
        if let Some(name) = &rec.name {
            store.release_name(name, id);
        }
        let why = "its supervisor had died; husk removed what remained".to_string();
        let ending = match rec.state {
            state::State::Failed => super::tombstone::Ending::Failed,
            _ => super::tombstone::Ending::Swept,
        };
        super::tombstone::write(store, &super::tombstone::now(id, rec.name.clone(), ending, Some(why)));
    }
    let r = match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("removing {}: {e}", dir.display())),
        _ => Ok(()),
    };
    drop(lock);
    Some(r.map(|()| killed))
}

/// SIGKILLs exactly this process (if it still exists) and waits up to 5 s
/// for it to go; true if it was there.
fn kill_and_wait(p: ProcRef) -> bool {
    signal_and_wait(p, libc::SIGKILL, 5000).is_some()
}

/// Sends `sig` to exactly this process and waits up to `ms` for it to end:
/// `None` if it was not there, else whether it ended in time.
fn signal_and_wait(p: ProcRef, sig: i32, ms: u16) -> Option<bool> {
    use std::os::fd::AsFd;
    let fd = p.pidfd()?;
    let _ = crate::sys::process::pidfd_send_signal(fd.as_fd(), sig);
    let mut pfd = [nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN)];
    Some(nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(ms)).is_ok_and(|n| n > 0))
}

/// Supervisors of this store's sandboxes whose record is gone (someone
/// deleted `<state>/sandboxes/<id>`, or the whole state directory, under a
/// live sandbox), found by what exists on the host rather than by state:
/// a process named `COMM` that holds `<store>/<id>/lock` open. Every
/// supervisor holds its lock for its whole life, and `/proc/<pid>/fd`
/// names the file by the path it had (`... (deleted)` once unlinked), so
/// the lock ties a supervisor to its state directory: another state
/// directory's supervisors hold another path and are never touched.
pub fn unrecorded(store: &Store) -> Vec<(String, ProcRef)> {
    let mut found = Vec::new();
    // The kernel prints the resolved path: compare with the resolved root.
    let root = std::fs::canonicalize(&store.root).unwrap_or_else(|_| store.root.clone());
    let comm = COMM.to_string_lossy();
    let Ok(procs) = std::fs::read_dir("/proc") else { return found };
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if !std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == comm) {
            continue;
        }
        let Some(id) = locked_sandbox(pid, &root) else { continue };
        if store.read(&id).is_ok() {
            continue;
        }
        if let Some(p) = ProcRef::of(pid) {
            found.push((id, p));
        }
    }
    found
}

/// The id of the sandbox under `root` whose lock `pid` holds open.
fn locked_sandbox(pid: i32, root: &Path) -> Option<String> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    fds.flatten().find_map(|fd| {
        let link = std::fs::read_link(fd.path()).ok()?;
        let text = link.to_str()?;
        let path = Path::new(text.strip_suffix(" (deleted)").unwrap_or(text));
        let dir = path.parent().filter(|_| path.file_name() == Some("lock".as_ref()))?;
        let id = dir.file_name()?.to_str()?;
        (dir.parent() == Some(root) && state::is_id(id)).then(|| id.to_string())
    })
}

/// Ends a sandbox whose record is gone. Its supervisor still knows the
/// init, the cgroups and the mounts: SIGTERM has it destroy them as for
/// `husk rm`. One that does not end in time (stopped, say) is SIGKILLed,
/// which takes its init (PDEATHSIG) and with it the sandbox's processes;
/// its cgroups, known here by the id only, are then removed once empty.
fn end_unrecorded(id: &str, sup: ProcRef, cgroup_parents: &[std::path::PathBuf], r: &mut SandboxGcReport) {
    let ended = match signal_and_wait(sup, libc::SIGTERM, 10_000) {
        Some(false) => signal_and_wait(sup, libc::SIGKILL, 5000).unwrap_or(true),
        _ => true,
    };
    r.killed.push(sup.pid);
    if !ended {
        r.errors.push(format!("sandbox {id}: its supervisor (pid {}) did not end after SIGKILL", sup.pid));
        return;
    }
    for (path, cg) in nested::sandbox_dirs(cgroup_parents) {
        if cg != id || !path.exists() {
            continue;
        }
        if let Err(e) = nested::remove_empty(&path) {
            r.errors.push(format!("sandbox {id}: {e}"));
        }
    }
    r.unrecorded.push(id.to_string());
    r.removed.push(id.to_string());
}

/// Removes every sandbox whose supervisor is gone (quietly: errors are
/// `husk gc`'s to report).
pub fn sweep(store: &Store) -> SandboxGcReport {
    let mut r = SandboxGcReport::default();
    for id in store.ids() {
        match sweep_one(store, &id) {
            None => r.live.push(id),
            Some(Ok(killed)) => {
                r.removed.push(id);
                r.killed.extend(killed);
            }
            Some(Err(e)) => r.errors.push(e),
        }
    }
    r
}

/// `husk gc`: `sweep`, plus stuck supervisors past their lease, abandoned
/// creations, stale names, and sandbox cgroups without a sandbox.
pub fn gc(store: &Store, cgroup_parents: &[std::path::PathBuf], min_age: Duration) -> SandboxGcReport {
    let mut r = SandboxGcReport::default();
    for (id, sup) in unrecorded(store) {
        end_unrecorded(&id, sup, cgroup_parents, &mut r);
    }
    for id in store.ids() {
        let dir = store.dir(&id);
        if state::supervised(&dir)
            && let Ok(rec) = state::read_record(&dir)
            && rec.active_execs == 0
            && rec.expires_ms + STUCK_AFTER_MS < now_ms()
            && let Some(sup) = rec.supervisor
            && kill_and_wait(sup)
        {
            r.killed.push(sup.pid);
            r.expired.push(id.clone());
            wait_unlocked(&dir);
        }
    }
    let swept = sweep(store);
    r.removed.extend(swept.removed);
    r.live = swept.live;
    r.killed.extend(swept.killed);
    r.errors.extend(swept.errors);
    abandoned(store, &mut r);
    r.tombstones_pruned = super::tombstone::prune(store);
    for name in store.stale_names() {
        let _ = std::fs::remove_file(store.root.join("names").join(name));
    }
    for (path, id) in nested::sandbox_dirs(cgroup_parents) {
        if store.dir(&id).exists() || age(&path) < min_age || nested::populated(&path) {
            continue;
        }
        // Ours only if it ended here: another state dir's sandbox may be
        // starting in it (its cgroup is made before its init joins).
        if super::tombstone::find(store, &id).is_none() {
            r.cgroups_left.push(path.display().to_string());
            continue;
        }
        match nested::remove_empty(&path) {
            Ok(()) => r.cgroups.push(path.display().to_string()),
            Err(e) => r.errors.push(e.to_string()),
        }
    }
    r
}

/// The init of a killed supervisor holds the lock's open file until its
/// PDEATHSIG lands; give it a moment.
fn wait_unlocked(dir: &std::path::Path) {
    for _ in 0..200 {
        if !state::supervised(dir) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn age(path: &std::path::Path) -> Duration {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or_default()
}

/// `.<id>.new` directories of creations that died before their rename.
fn abandoned(store: &Store, r: &mut SandboxGcReport) {
    let Ok(it) = std::fs::read_dir(&store.root) else { return };
    for e in it.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".new")) else { continue };
        if !state::is_id(id) || age(&e.path()) < ABANDONED_AFTER || state::supervised(&e.path()) {
            continue;
        }
        match std::fs::remove_dir_all(e.path()) {
            Ok(()) => r.removed.push(id.to_string()),
            Err(err) => r.errors.push(format!("removing {}: {err}", e.path().display())),
        }
    }
}
