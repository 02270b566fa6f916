//! Sandboxes that live under gVisor: `husk create --runtime runsc`, `husk
//! exec` into it (`runsc exec`), `husk rm`, the lease and `husk gc`, with
//! the real runsc (Debian's package, installed by scripts/test.sh). Root,
//! and in `mod rootless` as an unprivileged user (runsc as that user's
//! root; without cgroups there, HUSK_NO_CGROUP=1 as scripts/test.sh runs it).
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::*;
use serde_json::Value;
use std::time::Duration;

/// `husk create --runtime runsc` on the busybox root; the id.
fn create_runsc(s: &Sbx, extra: &[&str]) -> String {
    let root = busybox_rootfs().display().to_string();
    let mut args = vec!["--runtime", "runsc", "--rootfs", &root];
    args.extend_from_slice(extra);
    s.create_with(&args)
}

/// An exec's timeout kills its whole tree, a double-forked setsid daemon
/// included, while the sandbox and an earlier exec's background process
/// live on.
fn assert_exec_timeout_spares_sandbox(s: &Sbx, id: &str) -> Value {
    let (_, code) = s.sh(id, "sleep 1000 > /dev/null 2>&1 &");
    assert_eq!(code, 0);
    // The daemon starts its own session and its parent exits: only a kill
    // of the exec's whole tree reaches it.
    let script = "setsid sh -c 'sleep 2000 & sleep 2001' > /dev/null 2>&1 & sleep 3000";
    let (v, code) = s.exec_json(id, &["--timeout", "1s"], &["sh", "-c", script]);
    assert_eq!((code, &v["termination"]), (124, &Value::from("wall_timeout")), "{v:#}");
    let (out, code) = s.sh(id, "ps -o args");
    assert_eq!(code, 0, "the sandbox did not survive its exec's timeout: {out}");
    for gone in ["sleep 2000", "sleep 2001", "sleep 3000"] {
        assert!(!out.contains(gone), "`{gone}` survived the exec's timeout:\n{out}");
    }
    assert!(out.contains("sleep 1000"), "the earlier exec's background process was killed:\n{out}");
    v
}

/// Host pids of runsc processes (runsc, its gofer, its sandbox) whose
/// command line names `id`.
fn runsc_processes_of(id: &str) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return found };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let text = String::from_utf8_lossy(&cmd);
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
            .unwrap_or(true);
        if text.starts_with("runsc") && text.contains(id) && !zombie {
            found.push(pid);
        }
    }
    found
}

/// Nothing of the gVisor sandbox `rec` remains: no runsc process of it, no
/// runsc state, no run directory, and what `assert_gone` checks for every
/// sandbox (supervisor, state dir, name, cgroups).
fn assert_gvisor_gone(s: &Sbx, rec: &Value) {
    let id = rec["id"].as_str().unwrap();
    assert_gone(s, rec, None);
    let gone = wait_until(Duration::from_secs(10), || runsc_processes_of(id).is_empty());
    assert!(gone, "sandbox {id}: runsc processes remain: {:?}", runsc_processes_of(id));
    let runsc_root = s.state.join("runsc");
    let left: Vec<String> = std::fs::read_dir(&runsc_root)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(
        left.iter().all(|n| !n.contains(id)),
        "sandbox {id}: runsc state remains in {}: {left:?}",
        runsc_root.display()
    );
    let run_dir = s.state.join("runsc-runs").join(id);
    assert!(!run_dir.exists(), "sandbox {id}: run dir {} remains", run_dir.display());
}

#[test]
fn runsc_sandbox_runs_every_exec_on_gvisor_and_keeps_its_files() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let id = create_runsc(&s, &["--name", "gv"]);
    let rec = s.inspect(&id);
    assert_eq!(rec["backend"], "runsc", "{rec:#}");
    assert_eq!(rec["isolation"]["kernel"], "gvisor", "{rec:#}");
    assert!(!runsc_processes_of(&id).is_empty(), "no runsc sandbox process for {id}");

    // Each exec runs on gVisor's kernel, not the host's.
    let (v, code) = s.exec_json("gv", &[], &["uname", "-v"]);
    assert_eq!(code, 0, "{v:#}");
    assert!(stdout_of(&v).contains(GVISOR_UNAME_V), "uname -v is not gVisor's: {v:#}");
    assert_eq!(v["backend"], "runsc", "{v:#}");
    assert_eq!(v["sandbox_id"], id.as_str(), "{v:#}");
    assert_eq!(v["isolation"]["kernel"], "gvisor", "{v:#}");

    // Files persist between execs (the workdir and /tmp).
    let (out, code) = s.sh(&id, "echo one > notes.txt && echo two > /tmp/t && pwd");
    assert_eq!((out.trim(), code), ("/workspace", 0));
    let (out, code) = s.sh(&id, "cat notes.txt /tmp/t");
    assert_eq!((out.as_str(), code), ("one\ntwo\n", 0), "the second exec does not see the first one's files");

    // The exit-code contract of husk run.
    let (v, code) = s.exec_json(&id, &[], &["sh", "-c", "exit 7"]);
    assert_eq!((code, &v["termination"]), (7, &Value::from("exited")), "{v:#}");
    let (v, code) = s.exec_json(&id, &[], &["sh", "-c", "kill -9 $$"]);
    assert_eq!((code, &v["termination"], &v["signal"]), (137, &Value::from("signaled"), &Value::from(9)), "{v:#}");
    let (_, code) = s.exec_json(&id, &[], &["no-such-command"]);
    assert_eq!(code, 127);

    // No capabilities, no_new_privs, the plan's user and env.
    let (out, code) = s.sh(&id, "grep -E '^Cap(Eff|Prm|Bnd)|^Seccomp' /proc/self/status; id -u");
    assert_eq!(code, 0, "{out}");
    // gVisor applies --oci-seccomp to the container's init only: an exec
    // runs under the sandbox's filter because husk's reaper loads it.
    assert!(out.contains("Seccomp:\t2"), "an exec runs without the seccomp filter: {out}");
    let (v, _) = s.exec_json(&id, &[], &["true"]);
    assert_eq!(v["seccomp"]["mode"], "enforce", "{v:#}");
    let (v, _) = s.exec_json(&id, &[], &["/usr/bin/husk-probe", "try-syscall", "keyctl"]);
    let probe: Value = serde_json::from_str(stdout_of(&v).trim()).unwrap_or_default();
    assert_eq!(probe["errno"], "EPERM", "keyctl was not refused by the default profile: {v:#}");
    let caps: Vec<&str> = out.lines().filter(|l| l.starts_with("Cap")).collect();
    assert_eq!(caps.len(), 3, "CapEff, CapPrm and CapBnd not all listed: {out}");
    for line in caps {
        assert!(line.ends_with("0000000000000000"), "an exec has capabilities: {out}");
    }
    let out =
        s.out(&["exec", "--env", "GREETING=hi", "--user", "1000:1000", &id, "--", "sh", "-c", "echo $GREETING; id -u"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n1000\n", "{}", String::from_utf8_lossy(&out.stderr));

    let rec = s.inspect(&id);
    s.rm("gv");
    assert_gvisor_gone(&s, &rec);
}

#[test]
fn runsc_exec_timeout_kills_double_forked_daemon_but_spares_sandbox() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let id = create_runsc(&s, &[]);
    let v = assert_exec_timeout_spares_sandbox(&s, &id);
    assert_eq!(v["backend"], "runsc", "{v:#}");
    let rec = s.inspect(&id);
    s.rm(&id);
    assert_gvisor_gone(&s, &rec);
}

/// A SIGKILLed `husk exec` (Python's `subprocess.run(timeout=...)`) ends
/// its command inside gVisor as natively; what the command started in the
/// background lives on, as natively.
#[test]
fn runsc_exec_killed_by_sigkill_leaves_no_process() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let id = create_runsc(&s, &["--concurrent"]);
    let ps = || s.sh(&id, "ps -o args").0;
    let mut child = s.husk(&["exec", &id, "--", "sh", "-c", "sleep 3002 & exec sleep 3001"]).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(30), || ps().contains("sleep 3001")), "the command never ran: {}", ps());
    child.kill().unwrap();
    let _ = child.wait();
    assert!(
        wait_until(Duration::from_secs(15), || !ps().contains("sleep 3001")),
        "the command outlived its SIGKILLed husk exec:\n{}",
        ps()
    );
    assert!(ps().contains("sleep 3002"), "the exec's background process was killed too:\n{}", ps());
    let rec = s.inspect(&id);
    s.rm(&id);
    assert_gvisor_gone(&s, &rec);
}

/// A `husk create --runtime runsc` killed between READY and handing the
/// id over leaves no gVisor sandbox nobody can name.
#[test]
fn runsc_create_killed_before_handover_leaves_no_sandbox() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let root = busybox_rootfs().display().to_string();
    let rec = create_killed_before_handover(&s, &["--runtime", "runsc", "--rootfs", &root]);
    let id = rec["id"].as_str().unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || !s.dir(id).exists()),
        "the gVisor sandbox nobody received is still there: {}",
        s.inspect(id)["state"]
    );
    assert_gvisor_gone(&s, &rec);
}

#[test]
fn runsc_ttl_expiry_destroys_gvisor_sandbox() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let id = create_runsc(&s, &["--ttl", "1s"]);
    let rec = s.inspect(&id);
    assert!(!runsc_processes_of(&id).is_empty());
    assert!(wait_until(Duration::from_secs(15), || !s.dir(&id).exists()), "the lease ran out but {id} remains");
    assert_gvisor_gone(&s, &rec);
}

#[test]
fn runsc_rm_and_supervisor_sigterm_leave_nothing() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let id = create_runsc(&s, &[]);
    let (_, code) = s.sh(&id, "sleep 1000 > /dev/null 2>&1 &");
    assert_eq!(code, 0);
    let rec = s.inspect(&id);
    s.rm(&id);
    assert_gvisor_gone(&s, &rec);

    let id = create_runsc(&s, &[]);
    let rec = s.inspect(&id);
    signal_supervisor(&rec, nix::sys::signal::Signal::SIGTERM);
    assert!(wait_until(Duration::from_secs(15), || !s.dir(&id).exists()), "SIGTERM did not destroy {id}");
    assert_gvisor_gone(&s, &rec);
}

#[test]
fn sigkill_of_runsc_supervisor_then_gc_reaps_gvisor_sandbox() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let id = create_runsc(&s, &[]);
    let rec = s.inspect(&id);
    signal_supervisor(&rec, nix::sys::signal::Signal::SIGKILL);
    assert!(wait_until(Duration::from_secs(5), || !running(&rec["supervisor"])), "the supervisor survived SIGKILL");
    // runsc gives a detached sandbox no death signal: it is still there.
    assert!(
        !runsc_processes_of(&id).is_empty(),
        "the gVisor sandbox died with its supervisor (expected gc to reap it)"
    );
    let out = s.out(&["gc"]);
    assert!(out.status.success(), "husk gc: {}", String::from_utf8_lossy(&out.stderr));
    assert_gvisor_gone(&s, &rec);
}

#[test]
fn runsc_sandbox_memory_bomb_is_oom_killed_and_reported() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let id = create_runsc(&s, &["--memory", "128M"]);
    let rec = s.inspect(&id);
    // The limit bounds the whole gVisor sandbox (the sentry is in its
    // cgroup): the host's OOM killer ends it, and the exec says so.
    let (v, code) = s.exec_json(&id, &[], &["/usr/bin/husk-probe", "memhog", "600M"]);
    assert_eq!((code, &v["termination"]), (137, &Value::from("oom_killed")), "{v:#}");
    // 128M for the command, gVisor's sentry and gofer on top.
    assert_eq!(v["limits"]["memory"]["requested"], 128 * 1024 * 1024, "{v:#}");
    assert_eq!(v["limits"]["memory"]["applied"], (128 + 32) * 1024 * 1024, "{v:#}");
    assert!(wait_until(Duration::from_secs(15), || !s.dir(&id).exists()), "{id} outlived its sentry");
    assert_gvisor_gone(&s, &rec);
}

/// `--pids` holds for every exec: each `runsc exec` process gets the
/// sandbox's RLIMIT_NPROC inside gVisor, so a fork bomb meets EAGAIN there
/// while 20 background processes still start.
#[test]
fn runsc_sandbox_execs_meet_the_pids_limit_inside_gvisor() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let id = create_runsc(&s, &["--pids", "64"]);
    let (out, code) = s.sh(&id, "for i in $(seq 20); do sleep 1 & done; wait; echo ok");
    assert_eq!((code, out.as_str()), (0, "ok\n"));
    let (v, _) = s.exec_json(&id, &[], &["/usr/bin/husk-probe", "forkbomb", "4096"]);
    let r: Value = serde_json::from_str(stdout_of(&v).trim()).unwrap_or_else(|_| panic!("{v:#}"));
    assert_eq!(r["errno"], "EAGAIN", "{r}");
    assert!(r["forked"].as_u64().is_some_and(|n| (40..64).contains(&n)), "{r}");
    assert_eq!(v["limits"]["pids"]["workload_limit"], 64, "{v:#}");
}

mod rootless {
    use super::*;

    #[test]
    fn runsc_sandbox_keeps_files_and_times_out_a_daemon_without_privilege() {
        require_runsc!();
        let s = Sbx::new();
        let id = create_runsc(&s, &[]);
        let rec = s.inspect(&id);
        assert_eq!(rec["backend"], "runsc", "{rec:#}");
        let (out, code) = s.sh(&id, "uname -v; echo one > notes.txt");
        assert_eq!(code, 0, "{out}");
        assert!(out.contains(GVISOR_UNAME_V), "uname -v is not gVisor's: {out}");
        let (out, code) = s.sh(&id, "cat notes.txt");
        assert_eq!((out.as_str(), code), ("one\n", 0));
        assert_exec_timeout_spares_sandbox(&s, &id);
        s.rm(&id);
        assert_gvisor_gone(&s, &rec);
    }
}
