//! `husk run` returns once the verdict is read and leaves its teardown
//! (the init's exit, the cgroup's removal) to a detached reaper
//! (src/backend/native/teardown.rs). These tests hold it to its promise
//! that nothing is left behind: every reaper finishes, and a reaper that is
//! killed mid-teardown is finished by `husk gc` or by the next run.
mod common;
use common::*;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

/// How long a reaper may take before a test calls it stuck (a bound for a
/// loaded VM, not a speed claim).
const PATIENCE: Duration = Duration::from_secs(30);

/// A private state dir and cgroup parent, so parallel tests never share
/// reaper slots or see each other's cgroups. Dropping it removes the
/// parent cgroups (empty by then).
struct Setup {
    state: TempDir,
    parent: String,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        Setup { state: TempDir::new(tag), parent: format!("husk-test-teardown-{tag}-{}", std::process::id()) }
    }

    fn run(&self, env: &[(&str, &str)], cmd: &[&str]) -> Output {
        let rootfs = busybox_rootfs().to_str().unwrap().to_string();
        let mut args = vec!["run", "--json", "--rootfs", &rootfs, "--cgroup-parent", &self.parent, "--"];
        args.extend_from_slice(cmd);
        let mut c = husk(&args);
        c.env("HUSK_STATE_DIR", self.state.path());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("spawn husk")
    }

    fn slots(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.state.join("reapers")) {
            Ok(rd) => rd.flatten().map(|e| e.path()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// True once no reaper holds a slot and no record is left in one.
    fn reapers_done(&self) -> bool {
        self.slots().iter().all(|s| {
            let Ok(f) = std::fs::OpenOptions::new().read(true).write(true).open(s) else { return false };
            let free = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok();
            free && std::fs::read_to_string(s).is_ok_and(|t| t.is_empty())
        })
    }

    /// The pid a reaper wrote into its slot.
    fn reaper_pid(&self) -> Option<i32> {
        self.slots().iter().find_map(|s| {
            let text = std::fs::read_to_string(s).ok()?;
            text.lines().find_map(|l| l.strip_prefix("pid ")?.parse().ok())
        })
    }

    fn husk(&self, args: &[&str]) -> Output {
        husk(args).env("HUSK_STATE_DIR", self.state.path()).output().expect("spawn husk")
    }

    /// Every directory left under the private parent, in any hierarchy.
    fn leaves(&self) -> Vec<PathBuf> {
        cgroup_roots()
            .iter()
            .filter_map(|m| std::fs::read_dir(m.join(&self.parent)).ok())
            .flat_map(|rd| rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect::<Vec<_>>())
            .collect()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        for m in cgroup_roots() {
            let _ = std::fs::remove_dir(m.join(&self.parent));
        }
    }
}

/// Mount points of cgroup filesystems (v1 and v2).
fn cgroup_roots() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let mp = pre.split(' ').nth(4)?;
            post.starts_with("cgroup").then(|| PathBuf::from(mp))
        })
        .collect()
}

fn paths_of(v: &serde_json::Value) -> Vec<PathBuf> {
    v["limits"]["cgroup"]["paths"].as_array().unwrap().iter().map(|p| PathBuf::from(p.as_str().unwrap())).collect()
}

fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie waits for its new parent to reap it: it runs nothing.
        Ok(s) => s.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[test]
fn teardown_after_verdict_leaves_nothing() {
    require_root!();
    let s = Setup::new("nothing-left");
    let mut ids = Vec::new();
    let mut paths = Vec::new();
    for i in 0..8 {
        let out = s.run(&[], &["/bin/sh", "-c", &format!("echo run {i}; echo err >&2")]);
        let v = verdict_of(&out);
        assert_eq!(out.status.code(), Some(0), "{v}");
        // The verdict is exact although the sandbox was not yet gone:
        // all the output, the status and the counters.
        assert_eq!(stdout_of(&v), format!("run {i}\n"), "{v}");
        assert_eq!(stderr_of(&v), "err\n", "{v}");
        assert!(v["resources"]["pids_peak"].as_u64().is_some_and(|p| p >= 2), "{v}");
        assert!(v["resources"]["memory_peak_bytes"].as_u64().is_some_and(|p| p > 0), "{v}");
        ids.push(v["id"].as_str().unwrap().to_string());
        paths.extend(paths_of(&v));
    }
    assert!(wait_until(PATIENCE, || s.reapers_done()), "reapers still running: {:?}", s.slots());
    let left: Vec<_> = paths.iter().filter(|p| p.exists()).collect();
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
    assert!(s.leaves().is_empty(), "cgroups left under the parent: {:?}", s.leaves());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for id in &ids {
        assert!(!mounts.contains(id.as_str()), "a mount of run {id} is left on the host");
    }
    // The state dir holds nothing but the (empty, unlocked) reaper slots.
    let entries: Vec<_> = std::fs::read_dir(s.state.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(entries, vec![std::ffi::OsString::from("reapers")], "{entries:?}");
    assert!(s.slots().len() <= 4, "more reaper slots than the bound: {:?}", s.slots());
}

/// A reaper killed before it finished (SIGKILL: the caller's signals do
/// not reach it, but an OOM kill or an admin can) leaves its record; the
/// next run's reaper finishes that teardown before its own.
#[test]
fn killed_reaper_is_finished_by_the_next_run() {
    require_root!();
    let s = Setup::new("next-run");
    let (held, paths) = start_held_reaper(&s);
    kill_reaper(held);
    assert!(paths.iter().all(|p| p.exists()), "the killed reaper removed its cgroup: {paths:?}");
    let out = s.run(&[], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(wait_until(PATIENCE, || s.reapers_done()), "reapers still running: {:?}", s.slots());
    let left: Vec<_> = paths.iter().filter(|p| p.exists()).collect();
    assert!(left.is_empty(), "the next run did not finish the killed teardown: {left:?}");
    assert!(s.leaves().is_empty(), "{:?}", s.leaves());
}

/// The same, finished by `husk gc` (with the run's state dir) instead.
#[test]
fn killed_reaper_is_finished_by_gc() {
    require_root!();
    let s = Setup::new("gc");
    let (held, paths) = start_held_reaper(&s);
    kill_reaper(held);
    assert!(paths.iter().all(|p| p.exists()), "the killed reaper removed its cgroup: {paths:?}");
    let out = s.husk(&["gc", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let finished = v["native"]["finished"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(finished.len(), paths.len(), "{v}");
    let left: Vec<_> = paths.iter().filter(|p| p.exists()).collect();
    assert!(left.is_empty(), "gc did not finish the killed teardown: {left:?}\n{v}");
    assert!(s.reapers_done(), "{:?}", s.slots());
}

/// A run whose reaper waits (debug builds' test hook) before it removes
/// anything: returns the reaper's pid and the run's cgroup paths.
fn start_held_reaper(s: &Setup) -> (i32, Vec<PathBuf>) {
    let out = s.run(&[("HUSK_TEST_REAPER_HOLD_MS", "120000")], &["/bin/true"]);
    let v = verdict_of(&out);
    assert_eq!(out.status.code(), Some(0), "{v}");
    let pid = s.reaper_pid().unwrap_or_else(|| panic!("no reaper recorded in {:?}", s.slots()));
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert_eq!(comm.trim(), "husk:[reaper]", "pid {pid} is not a reaper");
    // Its own session: a signal to the caller's process group misses it.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    assert_eq!(fields[3], pid.to_string(), "the reaper leads no session of its own: {stat}");
    (pid, paths_of(&v))
}

fn kill_reaper(pid: i32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(wait_until(PATIENCE, || is_gone(pid)), "reaper {pid} survived SIGKILL");
}
