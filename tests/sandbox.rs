//! Sandboxes that live: `husk create`, many `husk exec`s, `husk rm`, the
//! lease, `husk gc`, and the promise that nothing of a sandbox remains
//! afterwards, even when its supervisor is SIGKILLed.
mod common;
mod sandboxkit;

mod rootless {
    use super::common::*;
    use super::sandboxkit::*;
    use std::io::Write;
    use std::process::Stdio;
    use std::time::Duration;

    #[test]
    fn files_written_by_one_exec_are_there_for_the_next() {
        for root in Root::BOTH {
            let s = Sbx::new();
            let extra: Vec<String> = match root {
                Root::Host => vec![],
                Root::Busybox => vec!["--rootfs".into(), busybox_rootfs().display().to_string()],
            };
            let mut args: Vec<&str> = extra.iter().map(String::as_str).collect();
            args.extend(["--name", "files"]);
            let id = s.create(&args);
            let (out, code) = s.sh("files", "echo one > notes.txt && echo two > /tmp/t && pwd");
            assert_eq!((out.trim(), code), ("/workspace", 0), "{root:?}");
            let (out, code) = s.sh(&id, "cat notes.txt /tmp/t");
            assert_eq!((out.as_str(), code), ("one\ntwo\n", 0), "{root:?}: the second exec does not see the files");
            let rec = s.inspect(&id);
            assert_eq!(rec["state"], "ready");
            assert_eq!(rec["execs"], 2);
            s.rm("files");
            assert_gone(&s, &rec, None);
        }
    }

    #[test]
    fn exec_is_confined_like_run_and_cannot_reach_husk() {
        let s = Sbx::new();
        let id = s.create(&[]);
        let caps = s.probe(&id, &["caps"]);
        assert_eq!(caps["all_empty"], true, "{caps}");
        assert_eq!(caps["no_new_privs"], true, "{caps}");
        assert_eq!(caps["seccomp"], 2, "no seccomp filter: {caps}");
        // Only the sandbox's pid namespace: its init as pid 1, the probe, and
        // no husk process (husk exec, the joiner) anywhere.
        let ps = s.probe(&id, &["ps"]);
        let procs = ps["processes"].as_array().unwrap();
        let init: Vec<_> = procs.iter().filter(|p| p["pid"] == 1).collect();
        assert_eq!(init.len(), 1, "{ps}");
        assert_eq!(init[0]["comm"], "husk:[init]", "{ps}");
        let me = procs.iter().find(|p| p["pid"] == ps["self"]).expect("the probe sees itself");
        assert_eq!(me["ppid"], 0, "the probe's parent (husk exec) must be outside the sandbox: {ps}");
        assert!(procs.iter().all(|p| p["pid"] == 1 || p["comm"] != "husk"), "{ps}");
        // No fd beyond stdio (no namespace fd, no socket to the supervisor).
        let fds = s.probe(&id, &["fds"]);
        let open: Vec<i64> = fds["fds"].as_array().unwrap().iter().filter_map(|f| f.as_i64()).collect();
        assert!(open.iter().all(|fd| *fd <= 2), "leaked fds: {fds}");
        // The init is husk: its /proc/1/exe must not be writable or openable.
        let exe = s.probe(&id, &["exe-write"]);
        assert_eq!(exe["ok"], false, "{exe}");
        // Signalling husk exec by its host pid reaches nothing.
        let mut child = s
            .husk(&["exec", &id, "--", "sh", "-c", "read p; kill -TERM \"$p\" 2>/dev/null; echo \"rc=$?\""])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        writeln!(child.stdin.take().unwrap(), "{pid}").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "rc=1", "kill of husk exec's pid worked from inside");
        assert!(out.status.success(), "husk exec was hit: {:?}", out.status);
    }

    #[test]
    fn exec_timeout_spares_sandbox() {
        let s = Sbx::new();
        let id = s.create(&[]);
        let keep = unique("keep");
        let (v, code) = s.exec_json(&id, &[], &[PROBE, "daemon", &keep, "300"]);
        assert_eq!((code, &v["termination"]), (0, &serde_json::json!("exited")), "{v:#}");
        let cgroup = v["limits"] != "none";
        // A background child in the exec's session, and (where each exec has
        // a cgroup) a daemon that left the session: all of the exec's tree.
        let doomed = unique("doomed");
        let daemon = if cgroup { format!("{PROBE} daemon {doomed} 300 >/dev/null;") } else { String::new() };
        let script = format!("{daemon} {PROBE} sleep {doomed} 300 & exec {PROBE} sleep {doomed} 300");
        let (v, code) = s.exec_json(&id, &["--timeout", "1s"], &["sh", "-c", &script]);
        assert_eq!(code, 124, "{v:#}");
        assert_eq!(v["termination"], "wall_timeout");
        assert_eq!(v["sandbox_id"], serde_json::json!(id));
        let ps = s.probe(&id, &["ps"]);
        let text = ps.to_string();
        assert!(text.contains(&keep), "the earlier exec's daemon died with the timed-out exec: {ps}");
        assert!(!text.contains(&doomed), "the timed-out exec's processes survived: {ps}");
        assert_eq!(s.inspect(&id)["state"], "ready");
    }

    #[test]
    fn ttl_expiry_destroys() {
        let s = Sbx::new();
        let (marker, tmpfs) = marker_mount("ttl");
        let id = s.create(&["--ttl", "1s", "--name", "short", "--tmpfs", &tmpfs]);
        let rec = s.inspect(&id);
        assert!(rec["lease_remaining_ms"].as_u64().unwrap() <= 1000, "{rec}");
        assert!(wait_until(Duration::from_secs(15), || !s.dir(&id).exists()), "the lease ran out, the sandbox stayed");
        assert_gone(&s, &rec, Some(&marker));
        let out = s.out(&["exec", "short", "--", "true"]);
        assert_eq!(out.status.code(), Some(125));
    }

    #[test]
    fn renew_extends_lease() {
        let s = Sbx::new();
        let id = s.create(&["--ttl", "2s"]);
        let out = s.out(&["renew", &id, "--ttl", "60s", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(r["lease_remaining_ms"].as_u64().unwrap() > 50_000, "{r}");
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(s.sh(&id, "echo alive").0, "alive\n", "renewed sandbox was destroyed at its first ttl");
        assert_eq!(s.inspect(&id)["ttl_ms"], 60_000);
        // Every exec renews: three execs 1.2 s apart outlive a 3 s lease.
        let short = s.create(&["--ttl", "3s"]);
        for i in 0..3 {
            std::thread::sleep(Duration::from_millis(1200));
            assert_eq!(s.sh(&short, "echo ok").1, 0, "exec {i}: the lease was not renewed by the previous exec");
        }
    }

    #[test]
    fn concurrent_exec_refused_or_waits() {
        let s = Sbx::new();
        let id = s.create(&[]);
        // Order is checked inside the sandbox (a marker file), not by
        // when the husk processes are reaped.
        let mut first = s.husk(&["exec", &id, "--", "sh", "-c", "sleep 2; echo first > /tmp/done"]).spawn().unwrap();
        assert!(wait_until(Duration::from_secs(10), || s.inspect(&id)["active_execs"] == 1));
        assert_eq!(s.inspect(&id)["state"], "executing");
        let busy = s.out(&["exec", &id, "--", "true"]);
        let err = String::from_utf8_lossy(&busy.stderr);
        assert_eq!(busy.status.code(), Some(125), "{err}");
        assert!(err.contains("busy") && err.contains("--wait"), "{err}");
        let waited = s.out(&["exec", "--wait", &id, "--", "cat", "/tmp/done"]);
        assert!(
            waited.status.success(),
            "--wait ran before the first exec ended: {}",
            String::from_utf8_lossy(&waited.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&waited.stdout), "first\n");
        assert!(first.wait().unwrap().success());
        // --concurrent: a second exec runs while the first one does.
        let c = s.create(&["--concurrent"]);
        let mut long = s.husk(&["exec", &c, "--", "sh", "-c", "sleep 2; echo long > /tmp/done"]).spawn().unwrap();
        assert!(wait_until(Duration::from_secs(10), || s.inspect(&c)["active_execs"] == 1));
        let par = s.out(&["exec", &c, "--", "sh", "-c", "test ! -e /tmp/done"]);
        assert!(par.status.success(), "the parallel exec did not overlap: {}", String::from_utf8_lossy(&par.stderr));
        assert!(long.wait().unwrap().success());
    }

    #[test]
    fn labels_select() {
        let s = Sbx::new();
        let a = s.create(&["--label", "task=x", "--name", "a"]);
        let b = s.create(&["--label", "task=x", "--label", "env=y"]);
        let c = s.create(&["--label", "task=z"]);
        let ls = |labels: &[&str]| {
            let mut args = vec!["ls", "--json"];
            for l in labels {
                args.extend(["--label", l]);
            }
            let v: serde_json::Value = serde_json::from_slice(&s.out(&args).stdout).unwrap();
            let mut ids: Vec<String> = v.as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().into()).collect();
            ids.sort();
            ids
        };
        let mut ab = vec![a.clone(), b.clone()];
        ab.sort();
        assert_eq!(ls(&["task=x"]), ab);
        assert_eq!(ls(&["task=x", "env=y"]), vec![b.clone()]);
        let out = s.out(&["rm", "--label", "task=x"]);
        assert!(out.status.success());
        assert_eq!(s.ids(), vec![c.clone()]);
        let text = String::from_utf8_lossy(&s.out(&["ls"]).stdout).into_owned();
        assert!(text.contains(&c) && text.contains("task=z") && !text.contains(&a), "{text}");
    }

    #[test]
    fn rm_of_unknown_id_is_clear_error() {
        let s = Sbx::new();
        let out = s.out(&["rm", "0123456789ab"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(err.contains("0123456789ab") && err.contains("husk ls"), "{err}");
        let out = s.out(&["exec", "--json", "nosuch", "--", "true"]);
        assert_eq!(out.status.code(), Some(125));
        let v = verdict_of(&out);
        assert_eq!(v["termination"], "setup_failed");
        assert!(v["error"]["message"].as_str().unwrap().contains("nosuch"), "{v:#}");
        for args in [&["rm"][..], &["renew", "nosuch"], &["inspect", "nosuch"]] {
            let out = s.out(args);
            assert_eq!(out.status.code(), Some(125), "{args:?}");
        }
    }

    /// A sandbox whose id nobody received would idle, unreachable, until
    /// its lease ran out: `create` with stdout on a full disk fails (125)
    /// and removes it; `exec --json` and `inspect` whose output is lost
    /// fail too, instead of exiting 0.
    #[test]
    fn output_lost_to_a_full_disk_fails_create_exec_and_inspect() {
        let full = || Stdio::from(std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap());
        let s = Sbx::new();
        let out = s.husk(&["create", "--name", "lost"]).stdout(full()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(err.contains("writing to stdout failed"), "{err}");
        assert!(s.ids().is_empty(), "the sandbox whose id was lost is still there: {:?}", s.ids());
        let id = s.create(&[]);
        for args in [&["exec", "--json", &id, "--", "true"][..], &["inspect", &id], &["ls", "--json"]] {
            let out = s.husk(args).stdout(full()).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
            assert!(err.contains("writing to stdout failed") && !err.contains("panicked"), "{args:?}: {err}");
        }
        assert_eq!(s.ids(), vec![id.clone()], "a lost exec verdict must not take the sandbox with it");
        s.rm(&id);
    }

    /// A `husk create` killed after its sandbox was READY but before the id
    /// reached its caller (a harness's timeout, a cancelled task) leaves a
    /// sandbox nobody can name: it must go at once, not at the lease's end.
    #[test]
    fn create_killed_before_handover_leaves_no_sandbox() {
        let s = Sbx::new();
        let (marker, tmpfs) = marker_mount("unclaimed");
        let rec = create_killed_before_handover(&s, &["--name", "unclaimed", "--tmpfs", &tmpfs]);
        assert!(
            wait_until(Duration::from_secs(15), || !s.dir(rec["id"].as_str().unwrap()).exists()),
            "the sandbox nobody received is still there: {}",
            s.inspect(rec["id"].as_str().unwrap())["state"]
        );
        assert_gone(&s, &rec, Some(&marker));
        assert!(s.ids().is_empty(), "{:?}", s.ids());
    }

    /// `create --env API_KEY=...` must not end up in a log through
    /// `husk inspect`, nor be readable by other users from the state files.
    #[test]
    fn inspect_does_not_reveal_env_secrets() {
        use std::os::unix::fs::PermissionsExt;
        let s = Sbx::new();
        let secret = unique("s3cret");
        let id = s.create(&["--env", &format!("API_KEY={secret}")]);
        let shown = s.out(&["inspect", &id]);
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(shown.status.success() && text.contains("API_KEY"), "{text}");
        assert!(!text.contains(&secret), "inspect printed the env value:\n{text}");
        let asked = s.out(&["inspect", "--show-env", &id]);
        assert!(String::from_utf8_lossy(&asked.stdout).contains(&secret), "--show-env hides the value");
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        for d in [s.state.path().to_path_buf(), s.state.join("sandboxes"), s.dir(&id)] {
            assert_eq!(mode(&d), 0o700, "{}", d.display());
        }
        assert_eq!(mode(&s.dir(&id).join("state.json")), 0o600);
        let (out, _) = s.sh(&id, "echo $API_KEY");
        assert_eq!(out.trim(), secret, "the exec still gets the value");
        s.rm(&id);
    }

    /// What Python's `subprocess.run(timeout=...)` and asyncio cancellation
    /// do to a `husk exec`: the command must not run on without it.
    #[test]
    fn exec_killed_by_sigkill_leaves_no_process() {
        let s = Sbx::new();
        let id = s.create(&[]);
        let tag = unique("orphan-cmd");
        let needle = format!("sleep\0{tag}\0");
        let mut child = s.husk(&["exec", &id, "--", PROBE, "sleep", &tag, "300"]).spawn().unwrap();
        // husk exec's own argv holds the needle too: the command is the other one.
        let husk_exec = child.id() as i32;
        let command = || host_pids_with(&needle).into_iter().filter(|p| *p != husk_exec).collect::<Vec<_>>();
        assert!(wait_until(Duration::from_secs(20), || !command().is_empty()), "the command never ran");
        child.kill().unwrap();
        let _ = child.wait();
        assert!(
            wait_until(Duration::from_secs(10), || command().is_empty()),
            "the command outlived its SIGKILLed husk exec: pids {:?}",
            command()
        );
        // The sandbox itself lives on, idle again.
        assert!(wait_until(Duration::from_secs(10), || s.inspect(&id)["state"] == "ready"), "{}", s.inspect(&id));
        let (out, code) = s.sh(&id, "echo still");
        assert_eq!((out.as_str(), code), ("still\n", 0));
    }

    #[test]
    fn sigkill_of_supervisor_then_gc_leaves_nothing() {
        let s = Sbx::new();
        // One is cleaned by `husk gc`, the other by the next husk command.
        for (tag, cleaner) in [("gc", &["gc"][..]), ("ls", &["ls"][..])] {
            let (marker, tmpfs) = marker_mount(tag);
            let id = s.create(&["--tmpfs", &tmpfs, "--name", tag]);
            let daemon = unique("orphan");
            let (v, _) = s.exec_json(&id, &[], &[PROBE, "daemon", &daemon, "300"]);
            assert_eq!(v["termination"], "exited", "{v:#}");
            let rec = s.inspect(&id);
            signal_supervisor(&rec, nix::sys::signal::Signal::SIGKILL);
            assert!(wait_until(Duration::from_secs(10), || !running(&rec["init"])), "the init outlived its supervisor");
            assert!(
                wait_until(Duration::from_secs(10), || host_pids_with(&format!("sleep\0{daemon}\0")).is_empty()),
                "a process of the sandbox outlived its init"
            );
            let out = s.out(cleaner);
            assert!(out.status.success(), "{cleaner:?}: {}", String::from_utf8_lossy(&out.stderr));
            if tag == "gc" {
                let text = String::from_utf8_lossy(&out.stdout);
                assert!(text.contains(&format!("removed sandbox {id}")), "{text}");
            }
            assert_gone(&s, &rec, Some(&marker));
        }
    }
}

use common::*;
use sandboxkit::*;
use std::time::Duration;

#[test]
fn exec_sees_same_limits_and_seccomp() {
    require_root!();
    let s = Sbx::new();
    let opts = ["--memory", "96M", "--pids", "48", "--rlimit", "nofile=123"];
    let id = s.create(&opts);
    let bind = format!("{}:{PROBE}", probe_path().display());
    let mut run_opts = vec!["--bind", &bind];
    run_opts.extend(opts);
    let (ev, code) = s.exec_json(&id, &[], &["sh", "-c", "ulimit -n"]);
    assert_eq!(code, 0, "{ev:#}");
    let (rv, _) = run_json(&run_opts, &["sh", "-c", "ulimit -n"]);
    assert_eq!(stdout_of(&ev), "123\n");
    assert_eq!(stdout_of(&rv), "123\n");
    for k in ["memory", "pids"] {
        assert_eq!(
            ev["limits"][k]["applied"], rv["limits"][k]["applied"],
            "{k}: exec {} run {}",
            ev["limits"], rv["limits"]
        );
    }
    assert_eq!(ev["limits"]["memory"]["applied"], 96 << 20);
    assert_eq!(ev["seccomp"]["sha256"], rv["seccomp"]["sha256"]);
    assert_eq!(ev["isolation"]["seccomp"]["profile"], "default");
    for sc in ["mount", "keyctl", "bpf", "userfaultfd", "unshare", "setns", "perf_event_open", "chroot"] {
        let e = s.probe(&id, &["try-syscall", sc]);
        let r = probe(&["try-syscall", sc]).report().clone();
        assert_eq!((&e["ok"], &e["errno"]), (&r["ok"], &r["errno"]), "{sc}: exec {e} vs run {r}");
    }
    // The task limit is the sandbox's, shared with its init.
    let bomb = s.probe(&id, &["forkbomb", "500"]);
    assert_eq!(bomb["ok"], false, "{bomb}");
    assert!(bomb["forked"].as_u64().unwrap() < 48, "{bomb}");
}

/// `create --runtime auto` picks as `run` does and records why, as `run`'s
/// verdict does.
#[test]
fn create_with_runtime_auto_records_its_choice() {
    require_root!();
    let s = Sbx::new();
    let id = s.create(&["--runtime", "auto"]);
    let rec = s.inspect(&id);
    assert_eq!(rec["backend"], "native", "{rec:#}");
    assert_eq!(rec["isolation"]["runtime_choice"]["chosen"], "native", "{rec:#}");
    s.rm(&id);
}

#[test]
fn per_exec_oom_is_reported() {
    require_root!();
    let s = Sbx::new();
    let id = s.create(&["--memory", "64M"]);
    let (v, code) = s.exec_json(&id, &[], &[PROBE, "memhog", "300M"]);
    assert_eq!(code, 137, "{v:#}");
    assert_eq!(v["termination"], "oom_killed");
    assert!(v["resources"]["oom_kills"].as_u64().unwrap() >= 1, "{}", v["resources"]);
    let leaf = v["limits"]["cgroup"]["paths"][0].as_str().unwrap().to_string();
    assert!(leaf.contains(&format!("sbx-{id}/exec-")), "{leaf}");
    // The supervisor removes an exec's (empty) leaf once the exec is over.
    assert!(wait_until(Duration::from_secs(5), || !std::path::Path::new(&leaf).exists()), "{leaf} remains");
    // The sandbox lives on, and the next exec has its own (clean) accounting.
    let (v, code) = s.exec_json(&id, &[], &["true"]);
    assert_eq!((code, &v["termination"]), (0, &serde_json::json!("exited")), "{v:#}");
    assert_eq!(v["resources"]["oom_kills"], 0, "{}", v["resources"]);
}

#[test]
fn no_leftovers_after_200_cycles() {
    require_root!();
    let s = Sbx::new();
    let mut recs = Vec::new();
    let mut markers = Vec::new();
    for i in 0..200 {
        let (marker, tmpfs) = marker_mount(&format!("cycle{i}"));
        let id = s.create(&["--tmpfs", &tmpfs]);
        let out = s.out(&["exec", &id, "--", "true"]);
        assert!(out.status.success(), "cycle {i}: {}", String::from_utf8_lossy(&out.stderr));
        recs.push(s.inspect(&id));
        s.rm(&id);
        markers.push(marker);
    }
    let mounts: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("mountinfo")).ok())
        .collect();
    for m in &markers {
        assert!(!mounts.iter().any(|t| t.contains(m.as_str())), "a mount of a removed sandbox remains: {m}");
    }
    let mut netns = Vec::new();
    for rec in &recs {
        assert!(!running(&rec["supervisor"]) && !running(&rec["init"]), "a process remains: {rec}");
        for d in rec["cgroup"]["dirs"].as_array().unwrap() {
            assert!(!std::path::Path::new(d["path"].as_str().unwrap()).exists(), "cgroup remains: {d}");
        }
        netns.push(rec["namespaces"]["net"].as_u64().expect("a sandbox has its own network namespace"));
    }
    let ids: Vec<String> = recs.iter().map(|r| r["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(netns_holders(&ids, &netns), Vec::<i32>::new(), "a process still holds a sandbox's netns");
    // Only the names directory, and the tombstones (bounded) of the 200.
    let mut left: Vec<_> =
        std::fs::read_dir(s.state.join("sandboxes")).unwrap().flatten().map(|e| e.file_name()).collect();
    left.sort();
    assert_eq!(left, ["names", "tombstones"].map(std::ffi::OsString::from), "state left behind");
    assert_eq!(std::fs::read_dir(s.state.join("sandboxes/names")).unwrap().count(), 0);
    assert!(wait_until(Duration::from_secs(5), || host_pids_with("husk: sandbox ")
        .iter()
        .all(|p| !recs.iter().any(|r| r["supervisor"]["pid"].as_i64() == Some(*p as i64)))));
}
