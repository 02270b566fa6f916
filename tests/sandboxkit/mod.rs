//! Helpers for the tests of long-lived sandboxes (`husk create` / `exec` /
//! `rm`): every test gets a state dir of its own, so parallel tests never
//! see each other's sandboxes, and whatever a test leaves is removed on drop.
#![allow(dead_code)]

use crate::common::*;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A state dir and the sandboxes in it.
pub struct Sbx {
    pub state: TempDir,
}

impl Default for Sbx {
    fn default() -> Self {
        Self::new()
    }
}

impl Sbx {
    pub fn new() -> Sbx {
        Sbx { state: TempDir::new("sbx-state") }
    }

    /// `husk --state-dir <ours> <args>`.
    pub fn husk(&self, args: &[&str]) -> Command {
        let mut a = vec!["--state-dir", self.state.path().to_str().unwrap()];
        a.extend_from_slice(args);
        husk(&a)
    }

    pub fn out(&self, args: &[&str]) -> Output {
        self.husk(args).output().expect("spawn husk")
    }

    /// `husk create <args>` in host mode with the probe bound; the id.
    pub fn create(&self, extra: &[&str]) -> String {
        let probe = format!("{}:{PROBE}", probe_path().display());
        let mut args = vec!["--bind", probe.as_str()];
        args.extend_from_slice(extra);
        self.create_with(&args)
    }

    /// `husk create <args>` exactly as given; the id (a failure panics
    /// with husk's stderr).
    pub fn create_with(&self, args: &[&str]) -> String {
        let mut all = vec!["create"];
        all.extend_from_slice(args);
        let out = self.out(&all);
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && id.len() == 12,
            "husk create {args:?} failed ({:?}): {}{}",
            out.status,
            id,
            String::from_utf8_lossy(&out.stderr)
        );
        id
    }

    /// `husk exec --json <extra> ID -- cmd...`: (verdict, exit code).
    pub fn exec_json(&self, id: &str, extra: &[&str], cmd: &[&str]) -> (Value, i32) {
        let mut args = vec!["exec", "--json"];
        args.extend_from_slice(extra);
        args.push(id);
        args.push("--");
        args.extend_from_slice(cmd);
        let out = self.out(&args);
        (verdict_of(&out), out.status.code().unwrap_or(-1))
    }

    /// `husk exec ID -- sh -c SCRIPT`: (stdout, exit code).
    pub fn sh(&self, id: &str, script: &str) -> (String, i32) {
        let out = self.out(&["exec", id, "--", "sh", "-c", script]);
        (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code().unwrap_or(-1))
    }

    /// The probe's one report from `husk exec ID -- {probe} args...`.
    pub fn probe(&self, id: &str, args: &[&str]) -> Value {
        let mut cmd = vec![PROBE];
        cmd.extend_from_slice(args);
        let (v, _) = self.exec_json(id, &[], &cmd);
        let line = stdout_of(&v);
        serde_json::from_str(line.lines().next().unwrap_or_default())
            .unwrap_or_else(|e| panic!("no probe report ({e}); verdict: {v:#}"))
    }

    pub fn inspect(&self, id: &str) -> Value {
        let out = self.out(&["inspect", id]);
        assert!(out.status.success(), "inspect {id}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("inspect prints JSON")
    }

    pub fn rm(&self, id: &str) {
        let out = self.out(&["rm", id]);
        assert!(out.status.success(), "rm {id}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The sandbox's directory in our state dir.
    pub fn dir(&self, id: &str) -> PathBuf {
        self.state.join("sandboxes").join(id)
    }

    pub fn ids(&self) -> Vec<String> {
        let out = self.out(&["ls", "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).expect("ls --json");
        v.as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
    }
}

impl Drop for Sbx {
    fn drop(&mut self) {
        let _ = self.husk(&["rm", "--all", "--force"]).output();
    }
}

/// Sends `sig` to the supervisor a sandbox record names.
pub fn signal_supervisor(rec: &Value, sig: nix::sys::signal::Signal) {
    let pid = rec["supervisor"]["pid"].as_i64().expect("record names its supervisor") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).expect("signal the supervisor");
}

/// A process named by pid and start time (as the record names it) that is
/// still running: same start time, and not a zombie (a zombie is only
/// waiting for its parent, outside husk's control, to reap it).
pub fn running(p: &Value) -> bool {
    let (Some(pid), Some(start)) = (p["pid"].as_i64(), p["start_time"].as_u64()) else { return false };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return false };
    let f: Vec<&str> = rest.split_whitespace().collect();
    f.first() != Some(&"Z") && f.get(19).and_then(|s| s.parse::<u64>().ok()) == Some(start)
}

/// Pids of host processes whose mount table mentions `marker`.
pub fn mounts_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return found };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).is_ok_and(|m| m.contains(marker)) {
            found.push(pid);
        }
    }
    found
}

/// Pids of host processes that belong to one of the sandboxes `ids` (their
/// command line or cgroup names it) and are in, or hold an fd to, one of
/// the network namespaces `inodes`. Namespace inode numbers are reused at
/// once by the kernel, so a foreign process in a namespace with one of
/// these numbers (another sandbox's, created later) is not a leftover.
pub fn netns_holders(ids: &[String], inodes: &[u64]) -> Vec<i32> {
    let is_ours = |text: &str| ids.iter().any(|id| text.contains(id.as_str()));
    let ours_ns = |link: &str| {
        link.strip_prefix("net:[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| inodes.contains(&n))
    };
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return found };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let cmd =
            String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()).into_owned();
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if !is_ours(&cmd) && !is_ours(&cgroup) {
            continue;
        }
        let own = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap_or_default();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|it| it.flatten().filter_map(|fd| std::fs::read_link(fd.path()).ok()).collect::<Vec<_>>())
            .unwrap_or_default();
        if std::iter::once(own).chain(fds).any(|l| ours_ns(&l.to_string_lossy())) {
            found.push(pid);
        }
    }
    found
}

/// Asserts that nothing of a sandbox remains: no running supervisor or
/// init, no state directory, no name, no cgroup, no mount carrying
/// `marker` in any process's mount table (when given).
pub fn assert_gone(sbx: &Sbx, rec: &Value, marker: Option<&str>) {
    let id = rec["id"].as_str().unwrap();
    let ok = wait_until(Duration::from_secs(10), || !running(&rec["supervisor"]) && !running(&rec["init"]));
    assert!(ok, "sandbox {id}: its supervisor or init still runs: {} {}", rec["supervisor"], rec["init"]);
    assert!(!sbx.dir(id).exists(), "sandbox {id}: state dir {} remains", sbx.dir(id).display());
    if let Some(name) = rec["name"].as_str() {
        let n = sbx.state.join("sandboxes/names").join(name);
        assert!(!n.exists(), "sandbox {id}: name file {} remains", n.display());
    }
    for d in rec["cgroup"]["dirs"].as_array().into_iter().flatten() {
        let p = Path::new(d["path"].as_str().unwrap());
        assert!(!p.exists(), "sandbox {id}: cgroup {} remains", p.display());
    }
    if let Some(m) = marker {
        assert_eq!(mounts_with(m), Vec::<i32>::new(), "sandbox {id}: processes still see its mounts");
    }
}

/// `--tmpfs` option whose mount point names the sandbox in mountinfo.
pub fn marker_mount(tag: &str) -> (String, String) {
    let marker = format!("/{}", unique(tag));
    (marker.clone(), format!("{marker}:1M"))
}

/// Runs `husk create <args>` with stdout on a pipe that is already full, so
/// it blocks printing the id of a READY sandbox, and SIGKILLs it there: the
/// moment between READY and the id reaching anyone. Returns the record of
/// the sandbox it made, read from its state directory.
pub fn create_killed_before_handover(sbx: &Sbx, args: &[&str]) -> Value {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use std::os::fd::AsFd;
    let (_r, w) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).unwrap();
    let chunk = [b'x'; 4096];
    while nix::unistd::write(&w, &chunk).is_ok() {}
    while nix::unistd::write(&w, &chunk[..1]).is_ok() {}
    // The pipe stays full and husk create's write blocks in it.
    fcntl(w.as_fd(), FcntlArg::F_SETFL(OFlag::empty())).unwrap();
    let mut all = vec!["create"];
    all.extend_from_slice(args);
    let mut child = sbx.husk(&all).stdout(std::process::Stdio::from(w)).spawn().unwrap();
    let ready = || -> Option<Value> {
        let dirs = std::fs::read_dir(sbx.state.join("sandboxes")).ok()?;
        dirs.flatten().find_map(|d| {
            let v: Value = serde_json::from_slice(&std::fs::read(d.path().join("state.json")).ok()?).ok()?;
            (v["state"] == "ready").then_some(v)
        })
    };
    let mut rec = None;
    assert!(
        wait_until(Duration::from_secs(60), || {
            rec = ready();
            rec.is_some()
        }),
        "husk create {args:?} made no READY sandbox"
    );
    // READY is recorded before it is reported: let husk create get to its
    // (blocked) print, which it reaches only after the report.
    assert!(
        wait_until(Duration::from_secs(20), || {
            std::fs::read_to_string(format!("/proc/{}/wchan", child.id())).is_ok_and(|w| w.contains("pipe_write"))
        }),
        "husk create never blocked printing the id"
    );
    child.kill().unwrap();
    let _ = child.wait();
    rec.unwrap()
}

// ------------------------------------------------ exec --code (docs/warm.md)

/// `husk exec [extra] ID --code -` with `code` on stdin.
pub fn code_out(s: &Sbx, id: &str, extra: &[&str], code: &str) -> Output {
    let mut args = vec!["exec"];
    args.extend_from_slice(extra);
    args.extend([id, "--code", "-"]);
    let mut child = s.husk(&args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(code.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// The verdict of `husk exec --json [extra] ID --code -`, and its exit code.
pub fn code_json(s: &Sbx, id: &str, extra: &[&str], code: &str) -> (Value, i32) {
    let mut e = vec!["--json"];
    e.extend_from_slice(extra);
    let out = code_out(s, id, &e, code);
    (verdict_of(&out), out.status.code().unwrap_or(-1))
}

pub fn stdout_text(v: &Value) -> &str {
    v["stdout"]["text"].as_str().unwrap_or("")
}

pub fn python3() -> &'static str {
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "SKIP: /usr/bin/python3 missing (scripts/test.sh installs python3)"
    );
    "/usr/bin/python3"
}

/// The stdout of a husk command that must have succeeded (`what` names it
/// in the failure, with both streams).
pub fn stdout_ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({:?}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
