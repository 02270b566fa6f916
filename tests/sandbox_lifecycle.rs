//! The life of long-lived sandboxes beyond create/exec/rm: which state
//! directory a command acts on, sandboxes whose record was deleted under
//! them, the absolute lifetime and what an exec on an ended sandbox says,
//! and the sandbox-level events (OOM kills, pids-limit hits) an exec
//! reports.
mod common;
mod sandboxkit;

mod rootless {
    use super::common::*;
    use super::sandboxkit::*;
    use std::time::Duration;

    /// Two tools on one host keep apart by state directory: `ls`,
    /// `rm --all|--label` and `gc` act on theirs only, and say which.
    #[test]
    fn gc_ls_and_rm_name_the_state_dir_they_act_on() {
        let a = Sbx::new();
        let b = Sbx::new();
        let in_a = a.create(&["--label", "tool=a"]);
        let in_b = b.create(&["--label", "tool=a"]);
        let dir_a = a.state.path().display().to_string();
        let ls = a.out(&["ls"]);
        let err = String::from_utf8_lossy(&ls.stderr);
        assert!(ls.status.success() && err.contains(&dir_a), "ls does not name its state dir: {err}");
        let ls = a.out(&["ls", "--json"]);
        assert!(String::from_utf8_lossy(&ls.stderr).contains(&dir_a));
        let gc = a.out(&["gc", "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&gc.stdout).expect("gc --json");
        assert_eq!(report["state_dir"], serde_json::json!(dir_a), "{report:#}");
        let gc = a.out(&["gc"]);
        let text = String::from_utf8_lossy(&gc.stdout);
        assert!(text.contains(&format!("state dir {dir_a}")), "{text}");
        let rm = a.out(&["rm", "--label", "tool=a", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&rm.stdout).expect("rm --json");
        assert_eq!(v["state_dir"], serde_json::json!(dir_a), "{v}");
        assert_eq!(v["removed"], serde_json::json!([in_a]), "{v}");
        let rm = a.out(&["rm", "--all"]);
        let err = String::from_utf8_lossy(&rm.stderr);
        assert!(rm.status.success() && err.contains(&dir_a), "rm --all does not name its state dir: {err}");
        assert_eq!(b.ids(), vec![in_b], "rm --label / --all in one state dir reached another's sandbox");
    }

    /// Deleting a live sandbox's record (its directory, or the whole state
    /// directory) used to leave its processes running while every command said
    /// "no sandbox": `husk gc` finds the supervisor by what is on the host and
    /// ends the sandbox, and only this state directory's.
    #[test]
    fn gc_ends_sandbox_whose_state_dir_was_deleted() {
        let other = Sbx::new();
        let kept = other.create(&[]);
        let s = Sbx::new();
        for (tag, whole) in [("record", false), ("statedir", true)] {
            let (marker, tmpfs) = marker_mount(tag);
            let id = s.create(&["--tmpfs", &tmpfs, "--name", tag]);
            let daemon = unique("unrecorded");
            let (v, _) = s.exec_json(&id, &[], &[PROBE, "daemon", &daemon, "300"]);
            assert_eq!(v["termination"], "exited", "{v:#}");
            let rec = s.inspect(&id);
            let gone = if whole { s.state.path().to_path_buf() } else { s.dir(&id) };
            // The supervisor may be writing its record right now (after the
            // inspect it answered): rm -rf fails then, as it would for a user.
            assert!(wait_until(Duration::from_secs(10), || std::fs::remove_dir_all(&gone).is_ok()));
            assert!(running(&rec["supervisor"]) && !host_pids_with(&format!("sleep\0{daemon}\0")).is_empty());
            let out = s.out(&["gc"]);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{tag}: {text}{}", String::from_utf8_lossy(&out.stderr));
            assert!(text.contains(&format!("removed sandbox {id}")), "{tag}: {text}");
            assert_gone(&s, &rec, Some(&marker));
            assert!(
                wait_until(Duration::from_secs(10), || host_pids_with(&format!("sleep\0{daemon}\0")).is_empty()),
                "{tag}: a process of the sandbox whose state was deleted still runs"
            );
        }
        assert_eq!(other.ids(), vec![kept.clone()], "gc of one state dir reaped another's sandbox");
        assert_eq!(other.sh(&kept, "echo alive").0, "alive\n");
    }

    fn err_of(out: &std::process::Output) -> String {
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// An exec on a sandbox that expired or was removed says so, with when,
    /// instead of the "no sandbox" of a typo'd id; `--max-lifetime` ends a
    /// sandbox however often it is used, a running exec included.
    #[test]
    fn exec_on_expired_or_removed_sandbox_says_so() {
        let s = Sbx::new();
        // A negative value is taken as a value and refused for what it is.
        let out = s.out(&["create", "--max-lifetime", "-1"]);
        let err = err_of(&out);
        assert!(out.status.code() == Some(125) && err.contains("invalid duration \"-1\""), "{err}");
        let id = s.create(&["--ttl", "10m", "--max-lifetime", "3s", "--name", "brief"]);
        let rec = s.inspect(&id);
        let ends = rec["lifetime_ends_ms"].as_u64().expect("the record has the lifetime's end");
        assert_eq!(ends - rec["created_ms"].as_u64().unwrap(), 3000, "{rec:#}");
        let renew = s.out(&["renew", &id, "--ttl", "1h", "--json"]);
        let r: serde_json::Value = serde_json::from_slice(&renew.stdout).expect("renew --json");
        assert_eq!(r["expires_ms"].as_u64(), Some(ends), "renew moved the lease past the maximum lifetime: {r}");
        // An exec that would outlive the maximum ends with the sandbox.
        let out = s.out(&["exec", &id, "--", "sleep", "600"]);
        assert_ne!(out.status.code(), Some(0), "{}", err_of(&out));
        // The command dies with the init; the supervisor removes the rest.
        assert!(
            wait_until(Duration::from_secs(10), || !s.dir(&id).exists()),
            "the sandbox outlived its --max-lifetime"
        );
        for target in [id.as_str(), "brief", &id[..5]] {
            let out = s.out(&["exec", target, "--", "true"]);
            let err = err_of(&out);
            assert_eq!(out.status.code(), Some(125), "{err}");
            assert!(err.contains(&format!("sandbox {id} (brief) expired at ")), "{target}: {err}");
            assert!(err.contains("--max-lifetime of 3s") && !err.contains("husk ls"), "{target}: {err}");
        }
        let out = s.out(&["exec", "--json", "brief", "--", "true"]);
        let v = verdict_of(&out);
        assert!(v["error"]["message"].as_str().unwrap_or_default().contains("expired at"), "{v:#}");

        let idle = s.create(&["--ttl", "1s"]);
        assert!(
            wait_until(Duration::from_secs(15), || !s.dir(&idle).exists()),
            "the lease ran out, the sandbox stayed"
        );
        let err = err_of(&s.out(&["exec", &idle, "--", "true"]));
        assert!(err.contains(&format!("sandbox {idle} expired at ")) && err.contains("--ttl 1s"), "{err}");

        let removed = s.create(&["--name", "done"]);
        s.rm("done");
        for args in [&["exec", "done", "--", "true"][..], &["exec", &removed, "--", "true"], &["renew", "done"]] {
            let out = s.out(args);
            let err = err_of(&out);
            assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
            assert!(err.contains(&format!("sandbox {removed} (done) was removed at ")), "{args:?}: {err}");
        }
        // An id that never existed is still unknown.
        let err = err_of(&s.out(&["exec", "0123456789ab", "--", "true"]));
        assert!(err.contains("no sandbox") && err.contains("husk ls"), "{err}");
        // A name is taken again by a new sandbox, which wins over the tombstone.
        let again = s.create(&["--name", "done"]);
        assert_eq!(s.sh("done", "echo new").0, "new\n");
        s.rm(&again);
    }

    /// `create --ready-cmd`: the sandbox is CREATING (and takes no other
    /// exec) until the check exits 0, and create returns only then; a check
    /// that fails or times out destroys the sandbox and reports the check's
    /// verdict, with --json as a setup_failed object (step ready_check).
    #[test]
    fn ready_cmd_gates_ready_and_a_failing_check_destroys_the_sandbox() {
        let s = Sbx::new();
        let sig = TempDir::new("ready-sig");
        std::fs::set_permissions(sig.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let bind = format!("{}:/sig:rw", sig.path().display());
        let check = "touch /sig/checking; while [ ! -e /sig/go ]; do sleep 0.05; done; echo checked";
        let mut create = s
            .husk(&["create", "--bind", &bind, "--name", "gated", "--json", "--ready-cmd", check])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        assert!(wait_until(Duration::from_secs(60), || sig.join("checking").exists()), "the check never ran");
        let ls: serde_json::Value = serde_json::from_slice(&s.out(&["ls", "--json"]).stdout).expect("ls --json");
        assert_eq!(ls[0]["state"], "creating", "{ls:#}");
        let out = s.out(&["exec", "--json", "gated", "--", "true"]);
        let v = verdict_of(&out);
        assert_eq!(out.status.code(), Some(125), "an exec ran in a CREATING sandbox: {v:#}");
        assert!(v["error"]["message"].as_str().unwrap_or_default().contains("still being created"), "{v:#}");
        assert!(create.try_wait().unwrap().is_none(), "create returned before its check ended");
        std::fs::write(sig.join("go"), "").unwrap();
        let out = create.wait_with_output().unwrap();
        let rec: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("create --json: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert!(out.status.success(), "{rec:#}");
        assert_eq!((rec["state"].as_str(), rec["ready_check"]["exit_code"].as_i64()), (Some("ready"), Some(0)));
        // READY as soon as create has returned: the next exec is admitted.
        assert_eq!(s.sh("gated", "echo in").0, "in\n");
        s.rm("gated");

        for (cmd, timeout, how, termination) in [
            ("echo not-importable >&2; exit 3", "60s", "exited 3", "exited"),
            ("sleep 30", "1s", "did not end within --ready-timeout 1s", "wall_timeout"),
        ] {
            let out = s.out(&["create", "--json", "--ready-cmd", cmd, "--ready-timeout", timeout]);
            let v = verdict_of(&out);
            assert_eq!(out.status.code(), Some(125), "{v:#}");
            assert_eq!(
                (v["termination"].as_str(), v["error"]["step"].as_str()),
                (Some("setup_failed"), Some("ready_check"))
            );
            assert!(v["error"]["message"].as_str().unwrap().contains(how), "{v:#}");
            assert_eq!(v["ready_check"]["termination"], termination, "{v:#}");
            if termination == "exited" {
                assert_eq!(v["ready_check"]["stderr"]["text"], "not-importable\n", "{v:#}");
            }
            let id = v["sandbox_id"].as_str().expect("the failure names the sandbox");
            assert!(!s.dir(id).exists(), "the sandbox of a failed check remains");
            assert_eq!(s.ids(), Vec::<String>::new());
            let err = err_of(&s.out(&["exec", id, "--", "true"]));
            assert!(err.contains("--ready-cmd"), "the tombstone does not say why: {err}");
        }
        // Without --json: the failure and the check's output on stderr.
        let out = s.out(&["create", "--ready-cmd", "echo nope >&2; false"]);
        let err = err_of(&out);
        assert!(out.status.code() == Some(125) && out.stdout.is_empty(), "{err}");
        assert!(err.contains("exited 1") && err.contains("nope") && err.contains("was destroyed"), "{err}");
    }
}

use common::*;
use sandboxkit::*;

/// A process an earlier exec left in the background and the kernel
/// OOM-killed while a later exec ran showed nowhere (the later exec's own
/// counters say 0): the later exec's verdict has it in `events`, and
/// `husk inspect` lists it, with pids-limit hits, renewals and execs.
#[test]
fn oom_kill_of_background_process_shows_in_exec_verdict_and_inspect() {
    require_root!();
    let s = Sbx::new();
    let id = s.create(&["--memory", "64M", "--pids", "48"]);
    // The hog waits for a file the next exec creates, so it is killed
    // while that exec runs, in the first exec's cgroup leaf.
    let hog =
        format!("(while [ ! -e /tmp/go ]; do sleep 0.05; done; exec {PROBE} memhog 300M) >/dev/null 2>&1 & echo $!");
    let (v, code) = s.exec_json(&id, &[], &["sh", "-c", &hog]);
    assert_eq!(code, 0, "{v:#}");
    let pid = stdout_of(&v).trim().to_string();
    let wait = format!("touch /tmp/go; while [ -e /proc/{pid} ]; do sleep 0.05; done");
    let (v, code) = s.exec_json(&id, &[], &["sh", "-c", &wait]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["resources"]["oom_kills"], 0, "the kill was in the earlier exec's leaf: {}", v["resources"]);
    let events = v["events"].as_array().unwrap_or_else(|| panic!("no events in the verdict: {v:#}"));
    let ooms: Vec<_> = events.iter().filter(|e| e["kind"] == "oom_kill").collect();
    assert!(!ooms.is_empty() && ooms[0]["count"].as_u64() >= Some(1), "{events:?}");
    assert!(events.iter().all(|e| e["kind"] != "exec"), "the exec's own start is not an event of it: {events:?}");
    // pids-limit hits anywhere in the sandbox, and a renewal.
    let bomb = s.probe(&id, &["forkbomb", "500"]);
    assert_eq!(bomb["ok"], false, "{bomb}");
    assert!(s.out(&["renew", &id]).status.success());
    let rec = s.inspect(&id);
    let kinds: Vec<&str> = rec["events"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    for k in ["exec", "oom_kill", "pids_limit", "renew"] {
        assert!(kinds.contains(&k), "inspect shows no {k} event: {kinds:?}");
    }
    s.rm(&id);
}
