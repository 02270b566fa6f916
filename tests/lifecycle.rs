//! How a sandbox lives and dies: pid 1 reaps, every process dies with the
//! run (timeout, exit, SIGKILL of husk), exit codes follow the contract,
//! setup failures name their step, rootless works, doctor tells the truth.
mod common;

mod rootless {
    use super::common::*;
    use serde_json::Value;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    /// argv fragment of `husk-probe sleep MARKER ...` (the daemon's argv).
    fn sleeper(marker: &str) -> String {
        format!("sleep\0{marker}\0")
    }

    #[test]
    fn pid1_reaps_zombies() {
        for root in Root::BOTH {
            let run = script_in(root, &[], "{probe} zombies 25; {probe} ps");
            let r = &run.reports;
            assert_eq!(r[0]["created"], 25, "{root:?}: {}", r[0]);
            assert_eq!(r[0]["unreaped"], serde_json::json!([]), "{root:?}: zombies left: {}", r[0]);
            assert_eq!(r[0]["ok"], true);
            let states: Vec<&str> =
                r[1]["processes"].as_array().unwrap().iter().map(|p| p["state"].as_str().unwrap_or("?")).collect();
            assert!(!states.contains(&"Z"), "{root:?}: zombie in {}", r[1]);
        }
    }

    #[test]
    fn timeout_kills_double_forked_daemon() {
        for root in Root::BOTH {
            let marker = unique("timeout-daemon");
            let script = format!("{{probe}} daemon {marker} 300; exec {{probe}} sleep {marker} 300");
            let run = script_in(root, &["--timeout", "1s"], &script);
            // Checked at once: husk returns only after the sandbox is gone.
            let left = host_pids_with(&sleeper(&marker));
            assert_eq!(run.code, 124, "{root:?}: {:#}", run.verdict);
            assert_eq!(run.verdict["termination"], "wall_timeout");
            assert_eq!(run.report()["ok"], true, "{root:?}: the daemon did not start: {}", run.report());
            assert!(run.report()["daemon_pid"].as_i64().is_some());
            assert_eq!(left, Vec::<i32>::new(), "{root:?}: sandbox processes outlived the timeout");
        }
    }

    #[test]
    fn exit_of_command_kills_leftover_daemon() {
        let marker = unique("exit-daemon");
        let run = probe_in(Root::Host, &[], &["daemon", &marker, "300"]);
        let left = host_pids_with(&sleeper(&marker));
        assert_eq!(run.code, 0, "{:#}", run.verdict);
        assert_eq!(run.report()["ok"], true);
        assert_eq!(left, Vec::<i32>::new(), "a daemon outlived the command's exit");
    }

    #[test]
    fn kill_grace_sends_sigterm_first() {
        let run = run_in(
            Root::Host,
            &["--timeout", "500ms", "--kill-grace", "5s"],
            &["sh", "-c", "trap 'echo got-term; exit 0' TERM; while :; do sleep 0.05; done"],
        );
        assert_eq!(run.code, 124, "{:#}", run.verdict);
        assert!(stdout_of(&run.verdict).contains("got-term"), "{:#}", run.verdict);
    }

    #[test]
    fn sigkill_of_husk_kills_sandbox() {
        for root in Root::BOTH {
            let marker = unique("sigkill");
            let p = root.probe();
            let mut args: Vec<String> = vec!["run".into()];
            args.extend(root.args());
            args.extend(["--".into(), "sh".into(), "-c".into()]);
            args.push(format!("{p} daemon {marker} 300 >/dev/null; exec {p} sleep {marker} 300"));
            let mut child = husk(&args.iter().map(String::as_str).collect::<Vec<_>>())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let up = wait_until(Duration::from_secs(10), || host_pids_with(&sleeper(&marker)).len() >= 2);
            child.kill().unwrap();
            child.wait().unwrap();
            assert!(up, "{root:?}: the sandbox's two sleepers never showed up");
            let gone = wait_until(Duration::from_secs(5), || host_pids_with(&sleeper(&marker)).is_empty());
            assert!(gone, "{root:?}: sandbox processes survived SIGKILL of husk: {:?}", host_pids_with(&marker));
        }
    }

    #[test]
    fn exit_codes() {
        let cases: &[(&[&str], &[&str], i32, &str)] = &[
            (&[], &["sh", "-c", "exit 0"], 0, "exited"),
            (&[], &["sh", "-c", "exit 3"], 3, "exited"),
            (&["--timeout", "300ms"], &["sleep", "10"], 124, "wall_timeout"),
            (&["--rlimit", "nofile=99999999"], &["true"], 125, "setup_failed"),
            (&[], &["/etc/hostname"], 126, "setup_failed"),
            (&[], &["/husk-no-such-command"], 127, "setup_failed"),
            (&[], &["husk-no-such-command"], 127, "setup_failed"),
            (&[], &["sh", "-c", "kill -9 $$"], 128 + 9, "signaled"),
        ];
        for (extra, cmd, want, termination) in cases {
            let (v, code) = run_json(extra, cmd);
            assert_eq!(code, *want, "--json {extra:?} {cmd:?}: {v:#}");
            assert_eq!(v["exit_code"], *want, "{cmd:?}");
            assert_eq!(v["termination"], *termination, "{cmd:?}: {v:#}");
            let mut args = vec!["run"];
            args.extend_from_slice(extra);
            args.push("--");
            args.extend_from_slice(cmd);
            let out = husk(&args).output().unwrap();
            assert_eq!(out.status.code(), Some(*want), "passthrough {extra:?} {cmd:?}");
        }
        let (v, _) = run_json(&[], &["sh", "-c", "kill -9 $$"]);
        assert_eq!(v["signal"], 9);
        assert_eq!(v["signal_name"], "SIGKILL");
    }

    #[test]
    fn setup_failure_names_step() {
        // A child-side step that fails with an errno: overlayfs refuses
        // procfs as a lower layer.
        let (v, code) = run_json(&["--rootfs", "/proc/sys"], &["true"]);
        assert_eq!(code, 125);
        assert_eq!(v["error"]["step"], "assemble_root", "{v:#}");
        assert_eq!(v["error"]["errno"], "EINVAL", "{v:#}");
        assert!(v["error"]["hint"].as_str().unwrap_or("").contains("/proc/sys"), "{v:#}");
        let out = husk(&["run", "--rootfs", "/proc/sys", "--", "true"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("setup failed at assemble_root: EINVAL"), "{stderr}");

        // A limit the sandbox could never set: refused at plan time, with the fix.
        let (v, code) = run_json(&["--rlimit", "nofile=99999999"], &["true"]);
        assert_eq!(code, 125);
        assert_eq!(v["error"]["step"], "plan", "{v:#}");
        assert!(v["error"]["message"].as_str().unwrap_or("").contains("husk's own"), "{v:#}");

        // A mount target inside a read-only host directory that lacks it:
        // refused at plan time, with the fix.
        let target = "/usr/husk-test-absent-dir";
        let (v, code) = run_json(&["--bind", &format!("/tmp:{target}")], &["true"]);
        assert_eq!(code, 125);
        assert_eq!(v["termination"], "setup_failed");
        let msg = v["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains(target), "message does not name the path: {v:#}");
        let fix = v["error"]["hint"].as_str().unwrap_or(msg);
        assert!(fix.contains("create it") || fix.contains("elsewhere"), "no fix in: {v:#}");

        // A rootfs that is not a directory / does not exist.
        let (v, code) = run_json(&["--rootfs", "/husk-no-such-rootfs"], &["true"]);
        assert_eq!(code, 125);
        assert!(v["error"]["message"].as_str().unwrap_or("").contains("/husk-no-such-rootfs"), "{v:#}");

        // A rootfs without the command: exec names ENOENT, exit 127.
        let empty = TempDir::new("emptyroot");
        let (v, code) = run_json(&["--rootfs", &empty.path().display().to_string()], &["/bin/sh"]);
        assert_eq!(code, 127, "{v:#}");
        assert_eq!(v["error"]["step"], "exec");
        assert_eq!(v["error"]["errno"], "ENOENT");
    }

    /// Rootless mode end to end (run as an unprivileged user: the test's own
    /// user, or `tester`/nobody when the suite runs as root). Many runs in a
    /// row: the id-map handshake must not be racy.
    #[test]
    fn rootless_run_works() {
        let dir = TempDir::new("rootless");
        let bin = copy_husk_to(dir.path());
        let probe = dir.join("husk-probe");
        std::fs::copy(probe_path(), &probe).unwrap();
        let (uid, gid) = if is_root() { unprivileged_user() } else { (nix::unistd::getuid().as_raw(), 0) };
        let cmd = |args: &[&str]| {
            let mut c = Command::new(&bin);
            c.args(args).stdin(Stdio::null()).current_dir(dir.path());
            if is_root() {
                use std::os::unix::process::CommandExt;
                c.uid(uid).gid(gid).env_remove("HUSK_ROOT").env_remove("HUSK_STATE_DIR");
            }
            // No cgroup is delegated to ordinary users on this host: limits
            // would refuse (tested in cgroup_limits); this checks the rest.
            c.env("HUSK_NO_CGROUP", "1");
            c
        };
        for i in 0..15 {
            let out = cmd(&["run", "--", "true"]).output().unwrap();
            assert!(out.status.success(), "run {i}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let bind = format!("{}:/husk-probe", probe.display());
        let out = cmd(&["run", "--json", "--bind", &bind, "--", "/husk-probe", "ids"]).output().unwrap();
        let v = verdict_of(&out);
        assert_eq!(v["exit_code"], 0, "{v:#}");
        assert_eq!(v["isolation"]["user_mapping"]["mode"], "rootless", "{v:#}");
        assert_eq!(v["isolation"]["user_mapping"]["sandbox_root_host_uid"], uid);
        let r: Value = serde_json::from_str(stdout_of(&v).trim()).unwrap();
        assert_eq!(r["uid"], 0);
        let map: Vec<String> = r["uid_map"].as_str().unwrap().split_whitespace().map(String::from).collect();
        assert_eq!(map, vec!["0".to_string(), uid.to_string(), "1".into()], "{r}");
        assert_eq!(r["setgroups"], "deny");
    }

    #[test]
    fn doctor_reports_this_host() {
        // Unprivileged without a delegated cgroup, default limits cannot be
        // applied: doctor must say so, with a fix, instead of claiming native
        // isolation works. HUSK_NO_CGROUP=1 (an explicit opt-out) lifts it.
        if !is_root() && !delegated_cgroup() {
            let out = husk(&["doctor", "--json"]).env_remove("HUSK_NO_CGROUP").output().unwrap();
            assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["native_ok"], false, "{v:#}");
            let cg = v["checks"].as_array().unwrap().iter().find(|c| c["name"] == "cgroups").unwrap();
            assert_eq!(cg["ok"], false, "{cg}");
            assert!(cg["fix"].as_str().unwrap_or("").contains("--no-cgroup"), "{cg}");
        }
        let out = husk(&["doctor", "--json"]).env("HUSK_NO_CGROUP", if is_root() { "" } else { "1" }).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["native_ok"], true, "{v:#}");
        let checks = v["checks"].as_array().unwrap();
        for name in ["user_namespaces", "overlayfs", "seccomp", "pidfd", "cgroups", "sandbox"] {
            let c = checks.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {name} check: {v:#}"));
            if c["required"] == true {
                assert_eq!(c["ok"], true, "{name}: {c}");
            }
        }
        // runsc is installed on this host; doctor must find it.
        if std::path::Path::new("/usr/bin/runsc").exists() || std::path::Path::new("/usr/local/bin/runsc").exists() {
            let c = checks.iter().find(|c| c["name"] == "runsc").expect("runsc check");
            assert_eq!(c["ok"], true, "{c}");
        }
        let out = husk(&["doctor"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("OK") && text.contains("user_namespaces"), "{text}");
    }

    #[test]
    fn doctor_without_cgroups_still_finds_isolation_and_prints_each_fix_once() {
        // Rootless without a delegated cgroup, `husk run --no-cgroup` works:
        // doctor must say that isolation is available (limits are what is
        // missing) and print each remedy once, not "fix: ...; fix: ...".
        if is_root() || delegated_cgroup() {
            return; // cgroups work here; doctor_reports_this_host covers it
        }
        let out = husk(&["doctor"]).env_remove("HUSK_NO_CGROUP").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{text}");
        for line in text.lines() {
            assert!(line.matches("fix:").count() <= 1, "a remedy printed twice: {line}\n{text}");
        }
        assert!(!text.contains("native isolation: NOT available"), "{text}");
        assert!(text.contains("native isolation: available with --no-cgroup"), "{text}");
        assert!(text.contains("resource limits: NOT available"), "{text}");
        let out = husk(&["doctor", "--json"]).env_remove("HUSK_NO_CGROUP").output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((v["isolation_ok"].clone(), v["limits_ok"].clone()), (true.into(), false.into()), "{v:#}");
        let checks = v["checks"].as_array().unwrap();
        let sandbox = checks.iter().find(|c| c["name"] == "sandbox").unwrap();
        assert_eq!(sandbox["ok"], true, "{sandbox}");
        let cg = checks.iter().find(|c| c["name"] == "cgroups").unwrap();
        assert!(!cg["fix"].as_str().unwrap().contains("fix:"), "{cg}");
        assert!(cg["detail"].as_str().unwrap().contains("no cgroup delegated"), "{cg}");
    }

    /// Whether the calling user owns a writable cgroup v2 subtree.
    fn delegated_cgroup() -> bool {
        let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") else { return false };
        let Some(path) = text.lines().find_map(|l| l.strip_prefix("0::")) else { return false };
        ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"].iter().any(|m| {
            let dir = format!("{m}{path}");
            std::path::Path::new(&format!("{dir}/cgroup.subtree_control")).exists()
                && nix::unistd::access(dir.as_str(), nix::unistd::AccessFlags::W_OK).is_ok()
                && std::fs::read_to_string(format!("{dir}/cgroup.controllers"))
                    .map(|c| c.contains("memory"))
                    .unwrap_or(false)
        })
    }
}
