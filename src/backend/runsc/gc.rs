//! Leftovers of runsc runs whose husk died before its own teardown (a
//! SIGKILL, a crash): their run directories, any sandbox process still
//! alive (normally none: runsc dies with husk and takes its sandbox along,
//! by PDEATHSIG), and the container state in runsc's `--root`.
//!
//! Every kill is of a process proven to be that run's sandbox (its command
//! line names husk's runsc root and the container id); a pid that now
//! belongs to something else is reported, never signalled.

use super::config::{self, RunscConfig};
use super::{Ctl, RunDir};
use crate::spec::{NetworkMode, RunscSpec};
use crate::sys::process::{pidfd_open, pidfd_send_signal};
use nix::unistd::Pid;
use serde::Serialize;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Who owns a run: husk's pid and its start time (clock ticks since boot,
/// /proc/PID/stat field 22), so a reused pid is not mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub pid: i32,
    pub start: u64,
}

/// A process's start time (see `ProcRef`, which owns the parsing).
pub fn start_time(pid: i32) -> Option<u64> {
    crate::procref::ProcRef::of(pid).map(|p| p.start_time)
}

impl Owner {
    pub fn me() -> Owner {
        let pid = std::process::id() as i32;
        Owner { pid, start: start_time(pid).unwrap_or(0) }
    }

    pub fn to_line(self) -> String {
        format!("{} {}\n", self.pid, self.start)
    }

    pub fn parse(text: &str) -> Option<Owner> {
        let mut it = text.split_whitespace();
        Some(Owner { pid: it.next()?.parse().ok()?, start: it.next()?.parse().ok()? })
    }

    pub fn alive(self) -> bool {
        start_time(self.pid) == Some(self.start)
    }
}

#[derive(Serialize, Debug, Default)]
pub struct RunscGcReport {
    /// Containers (run ids) whose leftovers were removed.
    pub removed: Vec<String>,
    /// Runs whose husk is still running: left alone.
    pub running: Vec<String>,
    /// Sandbox processes killed (host pids).
    pub killed: Vec<i32>,
    pub errors: Vec<String>,
}

/// Whether host `pid` is the sandbox of container `id` under `runsc_root`.
fn is_sandbox_of(pid: i32, runsc_root: &Path, id: &str) -> bool {
    let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<&[u8]> = cmd.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
    let root = format!("--root={}", runsc_root.display());
    args.first().is_some_and(|a| a.starts_with(b"runsc"))
        && args.contains(&root.as_bytes())
        && args.last().is_some_and(|a| *a == id.as_bytes())
}

/// Process state letter (/proc/PID/stat field 3).
fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().next()?.chars().next()
}

/// Kills `pid` if it is that sandbox, then waits until its parent has
/// reaped it: `runsc delete` takes a zombie for a live sandbox and waits
/// for it to stop. Err if it is alive and is not that sandbox, or lingers.
fn kill_sandbox(pid: i32, runsc_root: &Path, id: &str, report: &mut RunscGcReport) -> Result<(), KillError> {
    let Ok(fd) = pidfd_open(Pid::from_raw(pid)) else { return Ok(()) };
    let start = start_time(pid);
    if state_of(pid) != Some('Z') {
        // Checked after the pidfd is held, so the process cannot be swapped
        // for another between the check and the signal.
        if !is_sandbox_of(pid, runsc_root, id) {
            return Err(KillError::NotTheSandbox { pid, id: id.into() });
        }
        if pidfd_send_signal(fd.as_fd(), libc::SIGKILL).is_ok() {
            report.killed.push(pid);
        }
        if !wait_readable(fd.as_fd(), Duration::from_secs(5)) {
            return Err(KillError::Lingers { pid, id: id.into() });
        }
    }
    // Not our child: its parent (or init) reaps it.
    let reaped = (0..250).any(|_| {
        let gone = start_time(pid) != start || state_of(pid).is_none();
        if !gone {
            std::thread::sleep(Duration::from_millis(20));
        }
        gone
    });
    if !reaped {
        return Err(KillError::NotReaped { pid, id: id.into() });
    }
    Ok(())
}

/// Why a recorded sandbox process could not be ended.
#[derive(Debug, thiserror::Error)]
enum KillError {
    #[error("pid {pid} (recorded for {id}) is no longer its sandbox; not signalling it")]
    NotTheSandbox { pid: i32, id: String },
    #[error("sandbox pid {pid} of {id} did not exit after SIGKILL")]
    Lingers { pid: i32, id: String },
    #[error("sandbox pid {pid} of {id} is dead but not reaped yet by its parent; run husk gc again")]
    NotReaped { pid: i32, id: String },
}

/// Waits until a pidfd reports its process gone.
fn wait_readable(fd: std::os::fd::BorrowedFd<'_>, limit: Duration) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut p = [PollFd::new(fd, PollFlags::POLLIN)];
    let t = PollTimeout::try_from(limit.as_millis().min(60_000) as u64).unwrap_or(PollTimeout::MAX);
    matches!(poll(&mut p, t), Ok(n) if n > 0)
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// One container in runsc's `--root`, as `runsc list --format json` shows it.
#[derive(serde::Deserialize, Debug)]
struct Listed {
    id: String,
    status: String,
    pid: i32,
}

/// What runsc's `--root` holds (`runsc list --format json`).
fn list(cfg: &RunscConfig, report: &mut RunscGcReport) -> Vec<Listed> {
    if !cfg.runsc_root().is_dir() {
        return Vec::new();
    }
    let mut cmd = std::process::Command::new(&cfg.bin);
    cmd.args(cfg.global_args(NetworkMode::None)).args(["list", "--format", "json"]);
    cmd.stdin(std::process::Stdio::null());
    crate::sys::command::die_with_parent(&mut cmd);
    match cmd.output() {
        Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout).unwrap_or_default(),
        Ok(o) => {
            report.errors.push(format!("runsc list: {}", String::from_utf8_lossy(&o.stderr).trim()));
            Vec::new()
        }
        Err(e) => {
            report.errors.push(format!("runsc list: {e}"));
            Vec::new()
        }
    }
}

/// Removes what dead runsc runs left in `state` (husk's state directory).
pub fn gc_runsc(state: &Path) -> RunscGcReport {
    let mut report = RunscGcReport::default();
    let runs = config::runs_dir(state);
    let runsc_root = config::runsc_root(state);
    let cfg = RunscConfig::resolve(&RunscSpec::default(), state);
    let listed = match &cfg {
        Ok(cfg) => list(cfg, &mut report),
        Err(e) => {
            if runsc_root.is_dir() {
                report.errors.push(format!("cannot clean {}: {e}", runsc_root.display()));
            }
            Vec::new()
        }
    };
    // The sandbox pid runsc recorded, for a run whose own pid file is
    // missing (husk died before runsc wrote it).
    let listed_pid = |id: &str| listed.iter().find(|c| c.id == id && c.status != "stopped" && c.pid > 0).map(|c| c.pid);

    let mut seen = Vec::new();
    let dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    for path in dirs {
        let Some(id) = path.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
        seen.push(id.clone());
        let pid = listed_pid(&id);
        reap_dir(path, &id, &runsc_root, cfg.as_ref().ok(), pid, false, &mut report);
    }

    // Containers runsc knows without a run directory of husk's.
    if let Ok(cfg) = &cfg {
        for c in listed.iter().filter(|c| !seen.contains(&c.id)) {
            if c.status != "stopped"
                && c.pid > 0
                && let Err(e) = kill_sandbox(c.pid, &runsc_root, &c.id, &mut report)
            {
                report.errors.push(e.to_string());
                continue;
            }
            if delete(cfg, &c.id, &mut report) {
                report.removed.push(c.id.clone());
            }
        }
    }
    report
}

/// The leftovers of one run directory `path` (container `id`) whose owner
/// is dead: its sandbox, if still alive and proven to be that sandbox,
/// runsc's state of it, and the directory. A live owner's run is left
/// alone (`running`).
fn reap_dir(
    path: PathBuf,
    id: &str,
    runsc_root: &Path,
    cfg: Option<&RunscConfig>,
    listed_pid: Option<i32>,
    owner_dead: bool,
    report: &mut RunscGcReport,
) {
    let mut dir = RunDir { path, keep: false };
    let owner = std::fs::read_to_string(dir.owner()).ok().and_then(|t| Owner::parse(&t));
    if !owner_dead && owner.is_some_and(Owner::alive) {
        report.running.push(id.to_string());
        dir.keep = true;
        return;
    }
    let pid = read_pid(&dir.pid_file()).or(listed_pid);
    let mut ok = match pid.map(|p| kill_sandbox(p, runsc_root, id, report)) {
        Some(Err(e)) => {
            report.errors.push(e.to_string());
            false
        }
        _ => true,
    };
    if ok && let Some(cfg) = cfg {
        ok = delete(cfg, id, report);
    }
    if ok {
        report.removed.push(id.to_string());
    } else {
        // Keep the directory: it is the record of what is left.
        dir.keep = true;
    }
}

/// What a dead owner left of the run (or live sandbox) `id` in `state`
/// (husk's state directory); see `reap_dir`. Used by the sandbox sweep
/// for a gVisor sandbox whose supervisor died: it knows the owner is dead
/// by its lock, even while the owner is an unreaped zombie (which the
/// owner file's pid check would take for alive). `spec`: the runsc the
/// sandbox was made with (its --runsc-path).
pub fn reap_run(state: &Path, id: &str, spec: &RunscSpec) -> RunscGcReport {
    let mut report = RunscGcReport::default();
    let path = config::runs_dir(state).join(id);
    let cfg = RunscConfig::resolve(spec, state);
    if let Err(e) = &cfg {
        report.errors.push(format!("cannot clean runsc container {id}: {e}"));
    }
    if path.is_dir() {
        reap_dir(path, id, &config::runsc_root(state), cfg.as_ref().ok(), None, true, &mut report);
    } else if let Ok(cfg) = &cfg
        && delete(cfg, id, &mut report)
    {
        report.removed.push(id.to_string());
    }
    report
}

/// `runsc delete --force`; true when the container is gone.
pub fn delete(cfg: &RunscConfig, id: &str, report: &mut RunscGcReport) -> bool {
    let ctl = Ctl { cfg, network: NetworkMode::None, id };
    match ctl.runsc(&["delete", "--force", id]) {
        Ok(()) => {
            remove_stale_lock(cfg, id);
            true
        }
        Err(e) if e.not_found() => {
            remove_stale_lock(cfg, id);
            true
        }
        Err(e) => {
            report.errors.push(e.to_string());
            false
        }
    }
}

/// runsc (2022-12) can leave a container's empty `.lock` file behind when
/// its sandbox died first; once runsc no longer knows the container, only
/// that lock remains.
fn remove_stale_lock(cfg: &RunscConfig, id: &str) {
    let prefix = format!("{id}_");
    let Ok(rd) = std::fs::read_dir(cfg.runsc_root()) else { return };
    let names: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    let has_state = names.iter().any(|n| n.starts_with(&prefix) && n.ends_with(".state"));
    if !has_state {
        for n in names.iter().filter(|n| n.starts_with(&prefix) && n.ends_with(".lock")) {
            let _ = std::fs::remove_file(cfg.runsc_root().join(n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_line_round_trips_and_detects_reuse() {
        let me = Owner::me();
        assert!(me.start > 0);
        assert_eq!(Owner::parse(&me.to_line()), Some(me));
        assert!(me.alive());
        assert!(!Owner { start: me.start + 1, ..me }.alive(), "same pid, other start time: not the owner");
        assert_eq!(Owner::parse("12"), None);
    }

    #[test]
    fn only_a_matching_runsc_sandbox_is_recognised() {
        let me = std::process::id() as i32;
        assert!(!is_sandbox_of(me, Path::new("/run/husk/runsc"), "abc"));
    }
}
