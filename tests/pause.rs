//! `husk pause ID` / `husk resume ID` (docs/sandboxes.md, "Pause and
//! resume"): the sandbox's cgroup tree frozen by its supervisor until
//! resumed, its processes and memory kept, its lease held.
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The unified cgroup dir of a sandbox record (cpu.stat's usage_usec and
/// cgroup.freeze live there on v2 and hybrid hosts alike).
fn unified(rec: &Value) -> PathBuf {
    let dirs = rec["cgroup"]["dirs"].as_array().expect("the sandbox has cgroups");
    let d = dirs.iter().find(|d| d["unified"] == true).expect("a unified cgroup dir");
    PathBuf::from(d["path"].as_str().unwrap())
}

/// Microseconds of CPU the sandbox's processes used so far.
fn cpu_usec(dir: &Path) -> u64 {
    let stat = std::fs::read_to_string(dir.join("cpu.stat")).unwrap();
    let line = stat.lines().find(|l| l.starts_with("usage_usec ")).unwrap();
    line["usage_usec ".len()..].trim().parse().unwrap()
}

/// The kernel says every process of the tree is frozen.
fn frozen(dir: &Path) -> bool {
    let events = std::fs::read_to_string(dir.join("cgroup.events")).unwrap_or_default();
    events.lines().any(|l| l == "frozen 1")
}

/// `husk exec --code -` with `code` on stdin: stdout, exit code.
fn code(s: &Sbx, id: &str, code: &str) -> (String, i32) {
    let mut child = s.husk(&["exec", id, "--code", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(code.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code().unwrap_or(-1))
}

/// A session's state (a Python variable, the interpreter's memory) lives
/// through a pause: resume does not restart anything.
#[test]
fn pause_resume_keeps_session_variables() {
    require_root!();
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "SKIP: /usr/bin/python3 missing (scripts/test.sh installs python3)"
    );
    let s = Sbx::new();
    let id = s.create_with(&["--session", "python"]);
    assert_eq!(code(&s, &id, "import os\nx = 42\npid = os.getpid()"), (String::new(), 0));
    let out = stdout_ok(&s.out(&["pause", "--json", &id]), "pause");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["id"].as_str(), v["state"].as_str()), (Some(id.as_str()), Some("paused")), "{v}");
    let rec = s.inspect(&id);
    assert_eq!(rec["state"], "paused");
    assert!(frozen(&unified(&rec)), "the sandbox's cgroup is not frozen while paused");
    let out = stdout_ok(&s.out(&["resume", "--json", &id]), "resume");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["state"], "ready", "{v}");
    assert!(!frozen(&unified(&rec)), "the sandbox's cgroup is still frozen after resume");
    assert_eq!(code(&s, &id, "print(x, os.getpid() == pid)"), ("42 True\n".into(), 0));
}

/// A busy loop stops using CPU while paused, and the lease does not run
/// out under a pause however long (the TTL is idle time of a usable
/// sandbox); after resume the lease runs again from its full TTL.
#[test]
fn paused_sandbox_uses_no_cpu_and_keeps_its_lease_state() {
    require_root!();
    let s = Sbx::new();
    let id = s.create(&["--ttl", "2s"]);
    // Left running in the background: no exec holds the lease open.
    let (o, code) = s.sh(&id, "sh -c 'while :; do :; done' >/dev/null 2>&1 </dev/null & echo started");
    assert_eq!((o.as_str(), code), ("started\n", 0));
    let rec = s.inspect(&id);
    let cg = unified(&rec);
    let before = cpu_usec(&cg);
    assert!(wait_until(Duration::from_secs(5), || cpu_usec(&cg) > before + 10_000), "the busy loop uses no CPU");
    stdout_ok(&s.out(&["pause", &id]), "pause");
    let a = cpu_usec(&cg);
    // Longer than the TTL: an unpaused sandbox would have expired.
    std::thread::sleep(Duration::from_millis(3000));
    let b = cpu_usec(&cg);
    assert_eq!(a, b, "a paused sandbox used {}us of CPU", b - a);
    let rec = s.inspect(&id);
    assert_eq!(rec["state"], "paused", "the lease ended a paused sandbox: {rec:#}");
    assert_eq!(rec["expires_ms"], rec["lifetime_ends_ms"], "a paused sandbox's lease ends with its max lifetime");
    let listed = s.out(&["ls", "--json"]);
    let ls: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(ls[0]["state"], "paused", "{ls:#}");
    stdout_ok(&s.out(&["resume", &id]), "resume");
    let c = cpu_usec(&cg);
    assert!(wait_until(Duration::from_secs(5), || cpu_usec(&cg) > c), "the busy loop did not run again");
    // Resumed, its lease runs again: it expires with nothing to do.
    assert!(wait_until(Duration::from_secs(15), || !s.dir(&id).exists()), "the resumed sandbox's lease never ran out");
    assert_gone(&s, &rec, None);
}

/// An exec into a paused sandbox is refused at once (queued, it would
/// hang for as long as the pause, which has no deadline), names `husk
/// resume`, and runs nothing; after resume execs run.
#[test]
fn exec_into_paused_sandbox_says_so() {
    require_root!();
    let s = Sbx::new();
    let id = s.create(&[]);
    stdout_ok(&s.out(&["pause", &id]), "pause");
    let out = s.out(&["exec", "--json", &id, "--", "sh", "-c", "echo ran > /tmp/ran"]);
    let v = verdict_of(&out);
    assert_eq!(out.status.code(), Some(125), "{v:#}");
    assert_eq!(v["error"]["step"], "busy", "{v:#}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(&format!("husk resume {id}")), "{v:#}");
    stdout_ok(&s.out(&["resume", &id]), "resume");
    let (o, code) = s.sh(&id, "cat /tmp/ran 2>/dev/null; echo after");
    assert_eq!((o.as_str(), code), ("after\n", 0), "the refused exec ran");
    // Pausing twice, resuming twice: no-ops, not errors.
    stdout_ok(&s.out(&["pause", &id]), "pause");
    stdout_ok(&s.out(&["pause", &id]), "second pause");
    stdout_ok(&s.out(&["resume", &id]), "resume");
    stdout_ok(&s.out(&["resume", &id]), "second resume");
    assert_eq!(s.sh(&id, "echo up"), ("up\n".into(), 0));
}

/// The pause belongs to the supervisor: SIGKILL of `husk pause` once it
/// answered leaves the sandbox paused (it is not the client's to hold);
/// `husk rm` of a paused sandbox leaves nothing frozen or behind.
#[test]
fn killed_pause_client_leaves_pause_owned_by_supervisor() {
    require_root!();
    let s = Sbx::new();
    let id = s.create(&[]);
    let rec = s.inspect(&id);
    let cg = unified(&rec);
    let mut child = s.husk(&["pause", &id]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), format!("{id} paused"));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(300));
    assert!(frozen(&cg), "the pause ended with its client");
    assert_eq!(s.inspect(&id)["state"], "paused");
    s.rm(&id);
    assert_gone(&s, &rec, None);
}

/// `husk gc` kills supervisors long past their recorded lease (stuck
/// ones): a paused sandbox, whose lease does not run, is not one of them.
#[test]
fn gc_leaves_a_paused_sandbox_alone() {
    require_root!();
    let s = Sbx::new();
    let id = s.create(&["--ttl", "1s"]);
    let cg = unified(&s.inspect(&id));
    stdout_ok(&s.out(&["pause", &id]), "pause");
    // Past the lease and gc's 10 s of grace for a stuck supervisor.
    std::thread::sleep(Duration::from_millis(12_000));
    // Its own image store and OCI root: this gc touches nothing of others'.
    let own = TempDir::new("pause-gc");
    let oci = own.join("oci");
    let gc = s.husk(&["gc", "--oci-root", oci.to_str().unwrap()]).env("HUSK_ROOT", own.join("store")).output();
    stdout_ok(&gc.unwrap(), "gc");
    assert!(s.dir(&id).exists(), "gc removed a paused sandbox");
    assert_eq!(s.inspect(&id)["state"], "paused");
    assert!(frozen(&cg));
    stdout_ok(&s.out(&["resume", &id]), "resume");
    assert_eq!(s.sh(&id, "echo up"), ("up\n".into(), 0));
}

/// A pause nobody resumes does not keep the sandbox past its maximum
/// lifetime: it ends then, thawed and removed like any other.
#[test]
fn paused_sandbox_ends_at_its_max_lifetime() {
    require_root!();
    let s = Sbx::new();
    let id = s.create(&["--max-lifetime", "3s"]);
    let rec = s.inspect(&id);
    stdout_ok(&s.out(&["pause", &id]), "pause");
    assert!(
        wait_until(Duration::from_secs(20), || !s.dir(&id).exists()),
        "the paused sandbox outlived its max lifetime"
    );
    assert_gone(&s, &rec, None);
    let out = s.out(&["exec", &id, "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max-lifetime"), "{err}");
}
