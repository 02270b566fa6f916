//! A run's teardown after its verdict: the sandbox's init's exit (its
//! mount, pid and network namespaces, the overlay) and the removal of its
//! cgroup directories. Everything the verdict needs is read before (see
//! `run_native`); `husk run` then hands the rest to a detached reaper and
//! returns, as bwrap returns before its pid 1's teardown.
//!
//! The reaper is a fork of husk in a session of its own (a Ctrl-C, a
//! SIGHUP or a signal to the caller's process group does not reach it),
//! with /dev/null as stdio (a caller reading husk's output to EOF does not
//! wait for it). It holds one of `SLOTS` lock files in husk's state dir
//! for its whole life, with what it is removing written in it:
//!
//! - at most `SLOTS` reapers live at once: a run that finds every slot
//!   taken (a caller running `husk run` in a tight loop on a slow host)
//!   tears down inline, as before, so reapers never pile up;
//! - a reaper that was killed (SIGKILL, OOM) leaves its record in an
//!   unlocked slot; the next run that takes that slot has its reaper
//!   finish that teardown first. `husk gc` removes the same leftovers
//!   (empty run cgroups) too.
//!
//! Only a process that exits right after its run detaches (`husk run`
//! opts in with `detach_in`). Long-lived callers (serve, mcp, selftest)
//! tear down inline: a fork of a threaded server is not safe, and a
//! detached child there would be their zombie.

use crate::cgroup::Leftover;
use crate::sys::process::{Forked, SingleThreaded, exit_now, fork, wait_pidfd};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// How many reapers may run at once (per state dir).
pub const SLOTS: usize = 4;

/// Where the slots are; set once by a caller that exits after its run.
static DETACH: OnceLock<PathBuf> = OnceLock::new();

/// Debug builds only: the reaper waits this many ms before it starts, so
/// a test can kill it mid-teardown (`tests/teardown.rs`).
pub const HOLD_ENV: &str = "HUSK_TEST_REAPER_HOLD_MS";

/// Lets this process's runs detach their teardown, with the reapers'
/// slots in `state`/reapers. Called by `husk run`, which exits right after.
pub fn detach_in(state: &Path) {
    let _ = DETACH.set(state.join("reapers"));
}

/// What is left of a run once its verdict is read.
pub(crate) struct Teardown {
    /// The init, released and exiting (`Msg::Alone`); `None` once reaped.
    pub init: Option<OwnedFd>,
    pub cgroup: Option<Leftover>,
}

impl Teardown {
    /// Inline, in the init's parent. Returns the cgroup's cleanup error.
    fn finish_here(self) -> Option<String> {
        if let Some(p) = &self.init {
            let _ = wait_pidfd(p.as_fd());
        }
        self.cgroup.and_then(|c| c.remove().err().map(|e| e.to_string()))
    }
}

/// Detaches the teardown when this process may (`detach_in`, single
/// threaded, a free slot), else does it here. Returns the cgroup's cleanup
/// error when it was done here; a detached one has none to report yet.
pub(crate) fn hand_over(t: Teardown) -> Option<String> {
    if t.init.is_none() && t.cgroup.is_none() {
        return None;
    }
    let Some(dir) = DETACH.get() else { return t.finish_here() };
    let Ok(one) = SingleThreaded::check() else { return t.finish_here() };
    let Some(slot) = Slot::take(dir) else { return t.finish_here() };
    let hold =
        cfg!(debug_assertions).then(|| std::env::var(HOLD_ENV).ok()?.parse().ok().map(Duration::from_millis)).flatten();
    let mut record = slot.pending.as_ref().map(Leftover::record).unwrap_or_default();
    if let Some(c) = &t.cgroup {
        record.push_str(&c.record());
    }
    if slot.file.set_len(0).is_err() || slot.file.write_all_at(record.as_bytes(), 0).is_err() {
        return t.finish_here();
    }
    match fork(&one) {
        Ok(Forked::Child(_)) => reap(t, slot, record.len() as u64, hold),
        // The slot's lock stays with the reaper's copy of the open file.
        Ok(Forked::Parent { .. }) => None,
        Err(_) => t.finish_here(),
    }
}

/// One of the reapers' lock files, locked by us.
struct Slot {
    file: File,
    /// What a killed reaper left written in it.
    pending: Option<Leftover>,
}

impl Slot {
    fn take(dir: &Path) -> Option<Slot> {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => std::fs::DirBuilder::new().mode(0o700).recursive(true).create(dir).ok()?,
        }
        for k in 0..SLOTS {
            let Ok(file) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(dir.join(format!("slot-{k}")))
            else {
                continue;
            };
            if crate::sys::fd::try_lock_exclusive(file.as_fd()) != Ok(true) {
                continue;
            }
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut &file, &mut text);
            return Some(Slot { pending: Leftover::from_record(&text), file });
        }
        None
    }
}

/// The reaper: never returns.
fn reap(t: Teardown, slot: Slot, len: u64, hold: Option<Duration>) -> ! {
    let _ = nix::unistd::setsid();
    let _ = nix::sys::prctl::set_name(c"husk:[reaper]");
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        let null = null.into_raw_fd();
        for fd in 0..3 {
            let _ = crate::sys::fd::dup_onto(null, fd);
        }
    }
    // Nothing of husk's or the caller's but what the teardown needs: no
    // pipe the caller reads to EOF, no lock a later husk waits on. The
    // reaper leaves by `exit_now`, so no object whose fd this closes is
    // ever dropped here.
    let mut keep = vec![slot.file.as_raw_fd()];
    keep.extend(t.init.as_ref().map(AsRawFd::as_raw_fd));
    let _ = crate::sys::fd::close_all_except(&keep);
    let _ = slot.file.write_all_at(format!("pid {}\n", std::process::id()).as_bytes(), len);
    if let Some(h) = hold {
        std::thread::sleep(h);
    }
    if let Some(p) = &slot.pending {
        let _ = p.remove();
    }
    if let Some(init) = &t.init {
        // Not our child: its exit is seen on the pidfd, and it is reaped by
        // whoever inherits it. Bounded: the cgroup removal kills what is
        // left if it does not end.
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [PollFd::new(init.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::from(10_000u16));
    }
    if let Some(c) = &t.cgroup {
        let _ = c.remove();
    }
    let _ = slot.file.set_len(0);
    exit_now(0)
}

/// The reapers' slot directory of a state dir (for tests and `husk gc`).
pub fn slots_dir(state: &Path) -> PathBuf {
    state.join("reapers")
}

/// What `husk gc` did with the reapers' records of a state dir.
#[derive(serde::Serialize, Debug, Default, Clone, PartialEq, Eq)]
pub struct GcReport {
    /// Cgroup directories of teardowns whose reaper was killed, removed.
    pub finished: Vec<String>,
    pub errors: Vec<String>,
}

/// Finishes every teardown a killed reaper left recorded under `state`
/// (a slot nobody holds, with a record in it); slots held by a live reaper
/// are its own to finish. Each slot is held while it is worked on, so a
/// run starting now takes another one.
pub fn finish_interrupted(state: &Path) -> GcReport {
    let mut r = GcReport::default();
    let dir = slots_dir(state);
    for k in 0..SLOTS {
        let path = dir.join(format!("slot-{k}"));
        let Ok(file) = std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(&path)
        else {
            continue;
        };
        if crate::sys::fd::try_lock_exclusive(file.as_fd()) != Ok(true) {
            continue;
        }
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut &file, &mut text);
        let Some(left) = Leftover::from_record(&text) else { continue };
        match left.remove() {
            Ok(()) => {
                r.finished.extend(left.dirs().iter().map(|d| d.display().to_string()));
                let _ = file.set_len(0);
            }
            Err(e) => r.errors.push(format!("finishing the teardown recorded in {}: {e}", path.display())),
        }
    }
    r
}
