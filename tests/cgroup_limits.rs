//! Resource limits through cgroups, on the real kernel: the sandbox is born
//! limited, runaway memory / forks / cpu are bounded and reported, the
//! group dies together, and no cgroup outlives its run.
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Controllers husk uses; tests never create anything in other hierarchies.
const HUSK_CONTROLLERS: [&str; 5] = ["memory", "cpu", "cpuacct", "pids", "freezer"];

/// The cgroup mount points husk may use: cgroup2 and the v1 hierarchies
/// carrying a controller husk knows.
fn cgroup_mounts() -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let mp = pre.split(' ').nth(4)?;
            let mut post = post.split(' ');
            let fstype = post.next()?;
            let opts = post.nth(1)?;
            match fstype {
                "cgroup2" => Some((PathBuf::from(mp), "unified".to_string())),
                "cgroup" if opts.split(',').any(|o| HUSK_CONTROLLERS.contains(&o)) => {
                    Some((PathBuf::from(mp), opts.to_string()))
                }
                _ => None,
            }
        })
        .collect()
}

/// The mount of a v1 controller, if the host has one.
fn v1_mount(ctrl: &str) -> Option<PathBuf> {
    cgroup_mounts().into_iter().find(|(_, o)| o.split(',').any(|x| x == ctrl)).map(|(p, _)| p)
}

/// A parent cgroup name only this test uses, so parallel tests never see
/// each other's runs.
fn private_parent(name: &str) -> String {
    format!("husk-test-{name}-{}", std::process::id())
}

/// Run cgroups (directories) left under `parent` in any hierarchy.
fn leaves_under(parent: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (m, _) in cgroup_mounts() {
        if let Ok(rd) = std::fs::read_dir(m.join(parent)) {
            out.extend(rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()));
        }
    }
    out
}

/// How long a run's detached teardown may take to remove its cgroup
/// (src/backend/native/teardown.rs): a bound for a loaded VM.
const TEARDOWN: Duration = Duration::from_secs(30);

/// Run cgroups left under `parent` once the runs' reapers are done.
fn leaves_after_teardown(parent: &str) -> Vec<PathBuf> {
    wait_until(TEARDOWN, || leaves_under(parent).is_empty());
    leaves_under(parent)
}

/// True once `p` (a run's cgroup) is gone; its reaper may still be at work
/// when husk returns.
fn gone_after_teardown(p: &serde_json::Value) -> bool {
    wait_until(TEARDOWN, || !Path::new(p.as_str().unwrap()).exists())
}

/// Removes the private parent the test had husk create (never anything
/// else), once the runs' reapers have removed what is in it.
fn remove_parent(parent: &str) {
    wait_until(TEARDOWN, || leaves_under(parent).is_empty());
    for (m, _) in cgroup_mounts() {
        let p = m.join(parent);
        if p.exists() {
            std::fs::remove_dir(&p).unwrap_or_else(|e| panic!("removing test parent {}: {e}", p.display()));
        }
    }
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("expected a number, got {v}"))
}

fn have_python() -> bool {
    std::process::Command::new("python3").arg("-c").arg("pass").status().is_ok_and(|s| s.success())
}

#[test]
fn limits_are_applied_and_reported_by_default() {
    require_root!();
    let (v, code) = run_json(&[], &["true"]);
    assert_eq!(code, 0, "{v}");
    let l = &v["limits"];
    assert_eq!(l["memory"]["source"], "default");
    assert_eq!(l["memory"]["applied"], l["memory"]["requested"], "{l}");
    assert!(u(&l["memory"]["applied"]) <= 2 << 30);
    assert_eq!(l["pids"]["applied"], 1024);
    assert_eq!(l["swap"]["requested"], "off");
    assert_eq!(l["swap"]["applied_bytes"], 0, "{l}");
    assert!(l["cpus"].is_null());
    for p in l["cgroup"]["paths"].as_array().unwrap() {
        assert!(gone_after_teardown(p), "{p} left behind");
    }
    let r = &v["resources"];
    assert!(u(&r["memory_peak_bytes"]) > 0, "{r}");
    assert!(u(&r["pids_peak"]) >= 1, "{r}");
    assert_eq!(r["oom_kills"], 0);
    assert_eq!(r["pids_limit_hit"], false);
}

/// An opt-out must be an explicit yes: HUSK_NO_CGROUP=0 keeps limits (and
/// asking for a limit), and a limit asked for together with the opt-out is
/// refused, never silently dropped.
#[test]
fn no_cgroup_opt_out_is_never_silent() {
    require_root!();
    let out = husk(&["run", "--json", "--memory", "100M", "--", "true"]).env("HUSK_NO_CGROUP", "0").output().unwrap();
    let v = verdict_of(&out);
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["limits"]["memory"]["applied"], 100 << 20, "{v}");
    for env in [None, Some("1")] {
        let mut cmd = match env {
            None => husk(&["run", "--json", "--no-cgroup", "--memory", "100M", "--", "true"]),
            Some(e) => {
                let mut c = husk(&["run", "--json", "--memory", "100M", "--", "true"]);
                c.env("HUSK_NO_CGROUP", e);
                c
            }
        };
        let out = cmd.output().unwrap();
        let v = verdict_of(&out);
        assert_eq!(out.status.code(), Some(125), "{env:?}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("--memory needs a cgroup"), "{v}");
    }
}

#[test]
fn memory_bomb_is_oom_killed_and_reported() {
    require_root!();
    if !have_python() {
        return skip("python3 is not installed on the host");
    }
    let (v, code) = run_json(&["--memory", "256M"], &["python3", "-c", "b = bytearray(600 << 20)"]);
    assert_eq!(v["termination"], "oom_killed", "{v}");
    assert_eq!(code, 137);
    assert_eq!(v["exit_code"], 137);
    assert_eq!(v["limits"]["memory"]["applied"], 256u64 << 20);
    let r = &v["resources"];
    assert!(u(&r["oom_kills"]) >= 1, "{r}");
    let peak = u(&r["memory_peak_bytes"]);
    assert!((200 << 20..=257 << 20).contains(&peak), "peak {peak} should be about the 256M limit");
}

#[test]
fn oom_kill_of_a_child_is_reported_even_when_the_command_survives() {
    require_root!();
    if !have_python() {
        return skip("python3 is not installed on the host");
    }
    let script = "python3 -c 'b = bytearray(600 << 20)'; echo survived";
    let (v, code) = run_json(&["--memory", "128M"], &["sh", "-c", script]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["termination"], "exited");
    assert_eq!(stdout_of(&v), "survived\n");
    assert!(u(&v["resources"]["oom_kills"]) >= 1, "{}", v["resources"]);
}

#[test]
fn fork_bomb_is_bounded_by_pids() {
    require_root!();
    let child =
        husk(&["run", "--json", "--pids", "64", "--timeout", "3s", "--", "sh", "-c", "f(){ f | f & }; f; sleep 10"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
    // While the bomb runs the host can still start processes.
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..5 {
        let st = std::process::Command::new("sh").args(["-c", "exit 7"]).status().unwrap();
        assert_eq!(st.code(), Some(7), "host could not fork during the bomb");
    }
    let out = child.wait_with_output().unwrap();
    let v = verdict_of(&out);
    assert!(matches!(v["termination"].as_str(), Some("wall_timeout" | "exited")), "{v}");
    let r = &v["resources"];
    assert_eq!(r["pids_limit_hit"], true, "{r}");
    assert!(u(&r["pids_limit_hits"]) > 0);
    if !r["pids_peak"].is_null() {
        assert!(u(&r["pids_peak"]) <= 64, "{r}");
    }
    for p in v["limits"]["cgroup"]["paths"].as_array().unwrap() {
        assert!(gone_after_teardown(p), "{p} left behind");
    }
}

#[test]
fn cpu_hog_is_throttled() {
    require_root!();
    // A tenth of a cpu: the hog reaches its quota in every period even on a
    // loaded host (at --cpus 0.5 a host busy with other builds gave it less
    // than half a cpu, so it was never throttled and proved nothing).
    let (v, code) = run_json(&["--cpus", "0.1", "--timeout", "2s"], &["sh", "-c", "while :; do :; done"]);
    assert_eq!(code, 124, "{v}");
    assert_eq!(v["limits"]["cpus"]["applied"], 0.1);
    let r = &v["resources"];
    let cpu = u(&r["cpu_user_usec"]) + u(&r["cpu_system_usec"]);
    // 2 s of wall time at a tenth of a cpu is about 0.2 s; unthrottled on a
    // quiet host it would be about 2 s. Wide bounds: a shared, noisy VM.
    assert!((20_000..=500_000).contains(&cpu), "cpu time {cpu} us for 2 s at --cpus 0.1: {r}");
    assert!(u(&r["cpu_throttled_periods"]) > 0, "{r}");
}

#[test]
fn born_in_cgroup() {
    require_root!();
    let parent = private_parent("born");
    // The command's first action: where am I, what are my limits. The
    // cgroup namespace's root is the cgroup the sandbox's init was in when
    // it unshared it (right after its last cgroup join): "/" everywhere means
    // it was already in the run's cgroup; the run's cgroup.procs lists the
    // init (1) and the command (2); the limit files hold the limits.
    let script = format!(
        "grep -E ':(memory|pids)?:' /proc/self/cgroup; \
         cat /hostcg/pids/{p}/*/pids.max /hostcg/{p}/*/pids.max 2>/dev/null; \
         cat /hostcg/memory/{p}/*/memory.limit_in_bytes /hostcg/{p}/*/memory.max 2>/dev/null; \
         cat /hostcg/memory/{p}/*/cgroup.procs /hostcg/{p}/*/cgroup.procs 2>/dev/null | grep -c -x -e 1 -e 2",
        p = parent
    );
    let (v, code) = run_json(
        &["--memory", "100M", "--pids", "77", "--cgroup-parent", &parent, "--bind", "/sys/fs/cgroup:/hostcg"],
        &["sh", "-c", &script],
    );
    remove_parent(&parent);
    assert_eq!(code, 0, "{v}");
    let out = stdout_of(&v);
    let lines: Vec<&str> = out.lines().collect();
    let cg_lines: Vec<&&str> = lines.iter().filter(|l| l.contains(":/")).collect();
    assert!(!cg_lines.is_empty(), "{out}");
    for l in &cg_lines {
        assert!(l.ends_with(":/"), "not at its cgroup namespace root: {l}\n{out}");
    }
    assert!(lines.contains(&"77"), "pids.max not visible: {out}");
    assert!(lines.contains(&"104857600"), "memory limit not visible: {out}");
    assert_eq!(lines.last(), Some(&"2"), "init and command not both members: {out}");
}

#[test]
fn timeout_kills_via_cgroup() {
    require_root!();
    let marker = format!("{}.{}", 900 + std::process::id() % 97, std::process::id());
    let script = format!("sleep {marker} & sleep {marker} & (sleep {marker} &) ; wait");
    let (v, code) = run_json(&["--timeout", "1s"], &["sh", "-c", &script]);
    assert_eq!(code, 124, "{v}");
    assert_eq!(v["termination"], "wall_timeout");
    assert_eq!(v["resources"]["group_killed"], true, "{}", v["resources"]);
    let kill = v["limits"]["cgroup"]["kill"].as_str().unwrap();
    assert!(["cgroup.kill", "freeze+sigkill"].contains(&kill), "{kill}");
    for p in v["limits"]["cgroup"]["paths"].as_array().unwrap() {
        assert!(gone_after_teardown(p), "{p} left behind");
    }
    // SIGKILLed by the cgroup's kill before the verdict; they may still be
    // exiting when husk run has returned (its teardown finishes after it,
    // backend/native/teardown.rs), so gone within the teardown's bound.
    let sleepers = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
            })
            .map(|e| e.path())
            .collect::<Vec<_>>()
    };
    assert!(wait_until(TEARDOWN, || sleepers().is_empty()), "a sleeper survived: {:?}", sleepers());
}

#[test]
fn no_cgroup_left_after_runs() {
    require_root!();
    let parent = private_parent("leftovers");
    let p = ["--cgroup-parent", parent.as_str()];
    for i in 0..200 {
        let st = husk(&[&["run"][..], &p, &["--", "true"]].concat()).status().unwrap();
        assert_eq!(st.code(), Some(0), "run {i}");
    }
    // The other paths: setup failure, timeout, OOM-free kill by signal,
    // SIGINT to husk.
    let st = husk(&[&["run"][..], &p, &["--", "/no/such/command"]].concat()).status().unwrap();
    assert_eq!(st.code(), Some(127));
    let st = husk(&[&["run", "--timeout", "200ms"][..], &p, &["--", "sleep", "5"]].concat()).status().unwrap();
    assert_eq!(st.code(), Some(124));
    let st = husk(&[&["run"][..], &p, &["--", "sh", "-c", "kill -9 $$"]].concat()).status().unwrap();
    assert_eq!(st.code(), Some(137));
    for _ in 0..3 {
        let mut c = husk(&[&["run"][..], &p, &["--", "sleep", "5"]].concat()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
        let st = c.wait().unwrap();
        assert_eq!(st.code(), Some(130));
    }
    let left = leaves_after_teardown(&parent);
    remove_parent(&parent);
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
}

#[test]
fn limit_that_cannot_be_applied_fails_closed() {
    require_root!();
    let parent = private_parent("failclosed");
    let mut holder = None;
    if let Some(cpu) = v1_mount("cpu") {
        // v1: a child's cfs quota may not exceed its parent's (EINVAL).
        std::fs::create_dir(cpu.join(&parent)).unwrap();
        std::fs::write(cpu.join(&parent).join("cpu.cfs_quota_us"), "50000").unwrap();
    } else {
        // v2: a parent holding a process cannot enable controllers (EBUSY).
        let (m, _) = cgroup_mounts().into_iter().find(|(_, o)| o == "unified").unwrap();
        std::fs::create_dir(m.join(&parent)).unwrap();
        let sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        std::fs::write(m.join(&parent).join("cgroup.procs"), sleeper.id().to_string()).unwrap();
        holder = Some(sleeper);
    }
    // The limits are written while the sandbox already mounts its root
    // (docs/cgroups.md): the command must never start when one fails.
    let out = TempDir::new("failclosed");
    std::fs::set_permissions(out.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let bind = format!("{}:/out:rw", out.path().display());
    let (v, code) =
        run_json(&["--cpus", "1", "--cgroup-parent", &parent, "--bind", &bind], &["touch", "/out/command-ran"]);
    let left = leaves_under(&parent);
    if let Some(mut s) = holder {
        s.kill().unwrap();
        s.wait().unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    remove_parent(&parent);
    assert_eq!(code, 125, "{v}");
    assert_eq!(v["termination"], "setup_failed");
    assert_eq!(v["error"]["step"], "cgroup", "{v}");
    assert!(left.is_empty(), "a half-made cgroup was left: {left:?}");
    assert!(!out.join("command-ran").exists(), "the command ran without its limits");
    // Control: the same bind and command do leave the marker when the
    // cgroup can be made.
    let (v, code) = run_json(&["--bind", &bind], &["touch", "/out/control"]);
    assert_eq!(code, 0, "{v}");
    assert!(out.join("control").exists(), "the marker cannot show a command that ran: {v}");
}

#[test]
fn no_cgroup_runs_without_limits_and_says_so() {
    let (v, code) = run_json(&["--no-cgroup"], &["true"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["limits"], "none");
    assert!(v["resources"].is_null());
    assert!(v["isolation"]["downgrades"].as_array().unwrap().iter().any(|d| d == "no_cgroup"), "{v}");
}

#[test]
fn gc_removes_stale_cgroups() {
    require_root!();
    let id = format!("{:012x}", 0xdead_0000_0000u64 + std::process::id() as u64);
    let young = format!("{:012x}", 0xbeef_0000_0000u64 + std::process::id() as u64);
    let foreign = format!("not-a-run-{}", std::process::id());
    // husk's parents are where a default run puts its cgroups.
    let (v, _) = run_json(&[], &["true"]);
    let mounts: Vec<PathBuf> = v["limits"]["cgroup"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Path::new(p.as_str().unwrap()).parent().unwrap().to_path_buf())
        .collect();
    assert!(!mounts.is_empty());
    for parent in &mounts {
        for d in [&id, &young, &foreign] {
            std::fs::create_dir(parent.join(d)).unwrap();
        }
        // A crash an hour ago, as far as the directory's age goes.
        for d in [&id, &foreign] {
            let st = std::process::Command::new("touch").args(["-d", "1 hour ago"]).arg(parent.join(d)).status();
            assert!(st.unwrap().success());
        }
    }
    let out = husk(&["gc", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stale_left: Vec<_> = mounts.iter().filter(|p| p.join(&id).exists()).collect();
    let young_kept = mounts.iter().all(|p| p.join(&young).exists());
    let foreign_kept = mounts.iter().all(|p| p.join(&foreign).exists());
    for parent in &mounts {
        for d in [&young, &foreign] {
            let _ = std::fs::remove_dir(parent.join(d));
        }
    }
    assert!(out.status.success(), "{report}");
    assert!(stale_left.is_empty(), "gc left {stale_left:?}: {report}");
    assert!(young_kept, "gc removed a cgroup younger than --min-age");
    assert!(foreign_kept, "gc removed a directory that is not a run cgroup");
    let removed = report["cgroups"]["removed"].as_array().unwrap();
    assert!(removed.iter().filter(|p| p.as_str().unwrap().ends_with(&id)).count() == mounts.len(), "{report}");
}

#[test]
fn rootless_without_delegation_fails_closed() {
    let cmd = |extra: &str| -> (i32, String, String) {
        if is_root() {
            // Run as the unprivileged `tester`, from a copy it can reach.
            let bin = format!("/tmp/husk-rootless-cg-{}", std::process::id());
            std::fs::copy(husk_bin(), &bin).unwrap();
            let out = std::process::Command::new("su")
                .args(["tester", "-c", &format!("env -u HUSK_NO_CGROUP {bin} run --json {extra} -- true")])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let _ = std::fs::remove_file(&bin);
            let so = String::from_utf8_lossy(&out.stdout).into_owned();
            (out.status.code().unwrap_or(-1), so, String::from_utf8_lossy(&out.stderr).into_owned())
        } else {
            let args: Vec<&str> =
                ["run", "--json"].into_iter().chain(extra.split_whitespace()).chain(["--", "true"]).collect();
            // The rootless pass may set HUSK_NO_CGROUP for other tests.
            let out = husk(&args).env_remove("HUSK_NO_CGROUP").output().unwrap();
            let so = String::from_utf8_lossy(&out.stdout).into_owned();
            (out.status.code().unwrap_or(-1), so, String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    if is_root() && std::process::Command::new("id").arg("tester").output().map(|o| !o.status.success()).unwrap_or(true)
    {
        return skip("no unprivileged user `tester` on this host");
    }
    let (code, out, err) = cmd("");
    if code == 0 {
        // Only a run that really got limits proves delegation; one that ran
        // without them is the bug this test is for.
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
        assert!(
            v["limits"].is_object() && v["limits"]["cgroup"]["paths"].as_array().is_some_and(|p| !p.is_empty()),
            "a rootless run without delegation went ahead without limits: {out}"
        );
        return skip("this user has a delegated cgroup here; the no-delegation case cannot be shown");
    }
    assert_eq!(code, 125, "stdout: {out}\nstderr: {err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("delegated") && msg.contains("--no-cgroup"), "{msg}");
    assert!(err.contains("Delegate=yes"), "stderr names the fix: {err}");
    // The explicit downgrade runs, and says so.
    let (code, out, err) = cmd("--no-cgroup");
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["limits"], "none");
}
