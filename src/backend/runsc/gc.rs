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

/// Field 22 of /proc/PID/stat (after the parenthesised comm).
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
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

/// Kills `pid` if it is that sandbox; Err if it is alive and is not.
fn kill_sandbox(pid: i32, runsc_root: &Path, id: &str, report: &mut RunscGcReport) -> Result<(), String> {
    let Ok(fd) = pidfd_open(Pid::from_raw(pid)) else { return Ok(()) };
    // Checked after the pidfd is held, so the process cannot be swapped
    // for another between the check and the signal.
    if !is_sandbox_of(pid, runsc_root, id) {
        return Err(format!("pid {pid} (recorded for {id}) is no longer its sandbox; not signalling it"));
    }
    if pidfd_send_signal(fd.as_fd(), libc::SIGKILL).is_ok() {
        report.killed.push(pid);
    }
    // Not our child: wait for it to be gone (its parent reaps it).
    let gone = wait_readable(fd.as_fd(), Duration::from_secs(5));
    if !gone {
        return Err(format!("sandbox pid {pid} of {id} did not exit after SIGKILL"));
    }
    Ok(())
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

/// Removes what dead runsc runs left in `state` (husk's state directory).
pub fn gc_runsc(state: &Path) -> RunscGcReport {
    let mut report = RunscGcReport::default();
    let runs = config::runs_dir(state);
    let runsc_root = config::runsc_root(state);
    let cfg = RunscConfig::resolve(&RunscSpec::default(), state);
    let ctl = |cfg: &RunscConfig, id: &str, args: &[&str]| {
        let c = Ctl { cfg, network: NetworkMode::None, id };
        c.runsc(args)
    };

    let mut seen = Vec::new();
    let dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    for path in dirs {
        let Some(id) = path.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
        seen.push(id.clone());
        let dir = RunDir { path };
        let owner = std::fs::read_to_string(dir.owner()).ok().and_then(|t| Owner::parse(&t));
        if owner.is_some_and(Owner::alive) {
            report.running.push(id);
            std::mem::forget(dir);
            continue;
        }
        let mut ok = true;
        if let Some(pid) = read_pid(&dir.pid_file())
            && let Err(e) = kill_sandbox(pid, &runsc_root, &id, &mut report)
        {
            report.errors.push(e);
            ok = false;
        }
        if ok && let Ok(cfg) = &cfg {
            delete(cfg, &id, &ctl, &mut report);
        }
        if ok {
            report.removed.push(id);
        } else {
            // Keep the directory: it is the record of what is left.
            std::mem::forget(dir);
        }
    }

    // Containers runsc knows without a run directory of husk's.
    let Ok(cfg) = &cfg else {
        if runsc_root.is_dir() {
            report.errors.push(format!("cannot list {}: {}", runsc_root.display(), cfg.err().unwrap_or_default()));
        }
        return report;
    };
    if !runsc_root.is_dir() {
        return report;
    }
    let mut cmd = std::process::Command::new(&cfg.bin);
    cmd.args(cfg.global_args(NetworkMode::None)).args(["list", "--format", "json"]);
    crate::sys::command::die_with_parent(&mut cmd);
    let listed: Vec<Listed> = match cmd.stdin(std::process::Stdio::null()).output() {
        Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout).unwrap_or_default(),
        Ok(o) => {
            report.errors.push(format!("runsc list: {}", String::from_utf8_lossy(&o.stderr).trim()));
            Vec::new()
        }
        Err(e) => {
            report.errors.push(format!("runsc list: {e}"));
            Vec::new()
        }
    };
    for c in listed {
        if seen.contains(&c.id) {
            continue;
        }
        if c.status != "stopped"
            && c.pid > 0
            && let Err(e) = kill_sandbox(c.pid, &runsc_root, &c.id, &mut report)
        {
            report.errors.push(e);
            continue;
        }
        delete(cfg, &c.id, &ctl, &mut report);
        report.removed.push(c.id);
    }
    report
}

fn delete(
    cfg: &RunscConfig,
    id: &str,
    ctl: &impl Fn(&RunscConfig, &str, &[&str]) -> Result<(), String>,
    report: &mut RunscGcReport,
) {
    if let Err(e) = ctl(cfg, id, &["delete", "--force", id])
        && !e.contains("does not exist")
        && !e.contains("not found")
    {
        report.errors.push(e);
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
