//! The same promises under both backends: the same scenario runs natively
//! and under runsc (gVisor, Debian's `runsc`, installed by scripts/test.sh)
//! and must give the same exit code, termination and verdict shape. Plus
//! what only runsc has: the command runs on gVisor's kernel, nothing of
//! runsc survives husk, `husk gc` cleans up after a killed husk, and
//! `--runtime auto` picks and refuses honestly.
//!
//! Long-lived sandboxes under runsc (create/exec/rm) are tested in
//! tests/sandbox_runsc.rs.
mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Native,
    Runsc,
}

impl Backend {
    pub const BOTH: [Backend; 2] = [Backend::Native, Backend::Runsc];

    pub fn args(self) -> &'static [&'static str] {
        match self {
            Backend::Native => &[],
            Backend::Runsc => &["--runtime", "runsc"],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::Runsc => "runsc",
        }
    }
}

/// `sh -c SCRIPT` as root of a new user namespace that maps only the
/// caller (a nested container's view); the host's settings are untouched.
fn in_own_userns(script: &str) -> std::process::Output {
    std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "sh", "-c", script])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// `extra` with the backend's flags in front.
pub fn with(b: Backend, extra: &[&str]) -> Vec<String> {
    b.args().iter().chain(extra).map(|s| s.to_string()).collect()
}

pub fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Host processes whose command line mentions `needle` (runsc, its gofer
/// and sandbox all carry the run's id in theirs).
pub fn host_processes_naming(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.parse::<u32>().is_err() || name == me {
            continue;
        }
        if let Ok(cmd) = std::fs::read(format!("/proc/{name}/cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{name}: {cmd}"));
            }
        }
    }
    found
}

mod rootless {
    use super::*;

    #[test]
    fn exit_codes_are_the_same_under_both_backends() {
        require_runsc!();
        let cases: &[(&[&str], i32, &str)] = &[
            (&["sh", "-c", "exit 0"], 0, "exited"),
            (&["sh", "-c", "exit 3"], 3, "exited"),
            (&["sh", "-c", "exit 128"], 128, "exited"),
            (&["husk-no-such-command"], 127, "setup_failed"),
            (&["/husk-no-such-command"], 127, "setup_failed"),
            (&["/etc/hostname"], 126, "setup_failed"),
            (&["sh", "-c", "kill -9 $$"], 128 + 9, "signaled"),
        ];
        for b in Backend::BOTH {
            for (cmd, want, termination) in cases {
                let (v, code) = run_json(&refs(&with(b, &[])), cmd);
                assert_eq!(code, *want, "{b:?} {cmd:?}: {v:#}");
                assert_eq!(v["exit_code"], *want, "{b:?} {cmd:?}");
                assert_eq!(v["termination"], *termination, "{b:?} {cmd:?}: {v:#}");
                assert_eq!(v["backend"], b.name());
                if *want == 127 {
                    assert_eq!(
                        (v["error"]["step"].as_str(), v["error"]["errno"].as_str()),
                        (Some("exec"), Some("ENOENT"))
                    );
                }
            }
            let (v, _) = run_json(&refs(&with(b, &[])), &["sh", "-c", "kill -9 $$"]);
            assert_eq!((v["signal"].as_i64(), v["signal_name"].as_str()), (Some(9), Some("SIGKILL")), "{b:?}");
            // Passthrough mode returns the same code.
            let mut args = vec!["run".to_string()];
            args.extend(with(b, &["--", "sh", "-c", "exit 7"]));
            let out = husk(&refs(&args)).output().unwrap();
            assert_eq!(out.status.code(), Some(7), "{b:?} passthrough");
        }
    }

    #[test]
    fn root_is_read_only_and_workdir_writable_but_bounded() {
        require_runsc!();
        for b in Backend::BOTH {
            for root in Root::BOTH {
                let extra = with(b, &["--workdir-size", "1M"]);
                let run = script_in(
                    root,
                    &refs(&extra),
                    "{probe} write /husk-ro-test; {probe} write /etc/husk-ro-test; \
                     {probe} fill /workspace/small 512K; {probe} fill /workspace/big 2M; {probe} cwd",
                );
                let r = &run.reports;
                assert_eq!(r.len(), 5, "{b:?} {root:?}: {:#}", run.verdict);
                for w in &r[..2] {
                    assert_eq!(w["ok"], false, "{b:?} {root:?}: root writable: {w}");
                    assert_eq!(w["errno"], "EROFS", "{b:?} {root:?}: {w}");
                }
                assert_eq!(r[2]["ok"], true, "{b:?} {root:?}: workdir not writable: {}", r[2]);
                assert_eq!(r[3]["ok"], false, "{b:?} {root:?}: workdir unbounded: {}", r[3]);
                assert_eq!(r[3]["errno"], "ENOSPC", "{b:?} {root:?}: {}", r[3]);
                assert_eq!(r[4]["getcwd"], "/workspace", "{b:?} {root:?}: {}", r[4]);
            }
        }
    }

    #[test]
    fn no_network_but_loopback() {
        require_runsc!();
        for b in Backend::BOTH {
            let run = probe_in(Root::Host, &refs(&with(b, &[])), &["ifaces"]);
            assert_eq!(run.report()["names"], serde_json::json!(["lo"]), "{b:?}: {}", run.report());
            assert_eq!(run.report()["interfaces"][0]["up"], true, "{b:?}: {}", run.report());
            assert_eq!(run.verdict["isolation"]["network"], "none");
        }
    }

    #[test]
    fn env_cwd_and_user_are_the_same() {
        require_runsc!();
        for b in Backend::BOTH {
            let extra = with(b, &["--user", "1000:1000", "-e", "HUSK_PARITY=yes", "--workdir", "/w"]);
            let run = script_in(Root::Busybox, &refs(&extra), "{probe} ids; {probe} env; {probe} cwd; {probe} caps");
            let r = &run.reports;
            assert_eq!(r.len(), 4, "{b:?}: {:#}", run.verdict);
            assert_eq!((r[0]["euid"].as_u64(), r[0]["egid"].as_u64()), (Some(1000), Some(1000)), "{b:?}: {}", r[0]);
            assert_eq!(r[1]["env"]["HUSK_PARITY"], "yes", "{b:?}: {}", r[1]);
            assert!(r[1]["env"]["PATH"].as_str().is_some_and(|p| p.contains("/bin")), "{b:?}: {}", r[1]);
            assert_eq!(r[2]["getcwd"], "/w", "{b:?}: {}", r[2]);
            assert_eq!(r[3]["all_empty"], true, "{b:?}: capabilities left: {}", r[3]);
            assert_eq!(r[3]["no_new_privs"], true, "{b:?}: {}", r[3]);
            // The workdir belongs to the command's user: it can write there.
            let run = script_in(Root::Busybox, &refs(&extra), "{probe} write /w/file");
            assert_eq!(run.report()["ok"], true, "{b:?}: {}", run.report());
        }
    }

    #[test]
    fn capture_is_bounded_and_truncated_the_same_way() {
        require_runsc!();
        let mut seen = Vec::new();
        for b in Backend::BOTH {
            let extra = with(b, &["--output-limit", "100"]);
            let (v, code) = run_json(
                &refs(&extra),
                &["sh", "-c", "i=0; while [ $i -lt 1000 ]; do echo 123456789; i=$((i+1)); done; echo tail-end >&2"],
            );
            assert_eq!(code, 0, "{b:?}: {v:#}");
            assert_eq!(v["stdout"]["bytes"], 10_000, "{b:?}");
            assert_eq!(v["stdout"]["truncated"], true, "{b:?}");
            assert!(v["stdout"]["text"].as_str().unwrap().contains("bytes truncated]"), "{b:?}");
            assert_eq!(v["stderr"]["text"], "tail-end\n", "{b:?}");
            seen.push(v["stdout"]["text"].clone());
        }
        assert_eq!(seen[0], seen[1], "the kept head and tail differ between backends");
    }

    /// gVisor fills every /dev with the devices its kernel emulates
    /// (/dev/fuse, /dev/net/tun); husk covers those, so the workload finds
    /// the same device nodes under both backends.
    #[test]
    fn dev_holds_the_same_device_nodes_under_both_backends() {
        require_runsc!();
        let devices = |b: Backend| -> Vec<String> {
            let run = probe_in(Root::Host, &refs(&with(b, &[])), &["ls", "/dev"]);
            let r = run.report();
            assert_eq!(r["ok"], true, "{b:?}: {r}");
            let entries = r["entries"].as_array().unwrap();
            entries
                .iter()
                .filter(|e| e["type"] == "char" || e["type"] == "block")
                .map(|e| format!("{} {}:{}", e["name"].as_str().unwrap(), e["major"], e["minor"]))
                .collect()
        };
        let native = devices(Backend::Native);
        assert!(native.iter().any(|d| d == "null 1:3"), "{native:?}");
        assert_eq!(devices(Backend::Runsc), native, "runsc's /dev differs from native's");
        // What covers /dev/fuse is an empty read-only file.
        let run =
            script_in(Root::Host, &refs(&with(Backend::Runsc, &[])), "{probe} read /dev/fuse; {probe} write /dev/fuse");
        assert_eq!(
            (run.reports[0]["ok"].as_bool(), run.reports[0]["head"].as_str()),
            (Some(true), Some("")),
            "{:#}",
            run.verdict
        );
        assert_eq!(run.reports[1]["ok"], false, "{}", run.reports[1]);
    }

    /// Threads start under the default seccomp profile on both backends.
    /// glibc tries clone3 first and falls back to clone only on ENOSYS,
    /// which the profile answers; runsc's own `--oci-seccomp` turned it
    /// into EPERM (it drops errnoRet), so Python said "can't start new
    /// thread". husk loads its compiled filter inside gVisor instead.
    #[test]
    fn threads_start_under_the_default_profile_on_both_backends() {
        require_runsc!();
        for b in Backend::BOTH {
            let run = script_in(Root::Host, &refs(&with(b, &[])), "{probe} threads 8; {probe} try-syscall clone3");
            let r = &run.reports;
            assert_eq!(r.len(), 2, "{b:?}: {:#}", run.verdict);
            assert_eq!((r[0]["ok"].as_bool(), r[0]["joined"].as_u64()), (Some(true), Some(8)), "{b:?}: {}", r[0]);
            assert_eq!(r[1]["errno"], "ENOSYS", "{b:?}: clone3 must be ENOSYS for libc's fallback: {}", r[1]);
        }
    }

    #[test]
    fn verdicts_have_the_same_shape() {
        require_runsc!();
        let (n, _) = run_json(&[], &["true"]);
        let (r, _) = run_json(&["--runtime", "runsc"], &["true"]);
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&n), keys(&r), "top-level verdict keys differ");
        for k in ["namespaces", "user", "network", "rootfs", "capabilities", "no_new_privs", "downgrades"] {
            assert!(n["isolation"].get(k).is_some() && r["isolation"].get(k).is_some(), "isolation.{k}: {r:#}");
        }
        assert_eq!(n["isolation"]["rootfs"], r["isolation"]["rootfs"]);
        assert_eq!((n["backend"].as_str(), r["backend"].as_str()), (Some("native"), Some("runsc")));
        // runsc says what it actually applied.
        assert_eq!(r["isolation"]["kernel"], "gvisor");
        assert!(r["isolation"]["runsc"]["platform"].as_str().is_some_and(|p| p != "kvm"), "{r:#}");
        assert!(r["isolation"]["runsc"]["version"].is_string());
        assert!(r["phases_ms"]["runsc"].as_f64().is_some(), "{r:#}");
    }

    #[test]
    fn command_under_runsc_runs_on_gvisors_kernel() {
        require_runsc!();
        let host_release = nix::sys::utsname::uname().unwrap().release().to_string_lossy().into_owned();
        // With husk's default profile, syslog(2) is denied (as natively), so
        // dmesg fails even on gVisor; uname -v carries gVisor's signature.
        let (v, code) = run_json(&["--runtime", "runsc"], &["sh", "-c", "uname -v; uname -r; dmesg || true"]);
        assert_eq!(code, 0, "{v:#}");
        let out = stdout_of(&v);
        assert!(out.contains(GVISOR_UNAME_V), "uname -v is not gVisor's: {out}");
        assert!(!out.contains(&host_release), "the host's kernel answered: {out}");
        assert!(stderr_of(&v).contains("dmesg"), "the seccomp profile must deny syslog under runsc too: {v:#}");
        // Without a filter, gVisor's own boot log answers.
        let (v, code) = run_json(&["--runtime", "runsc", "--seccomp", "unconfined"], &["dmesg"]);
        assert_eq!(code, 0, "{v:#}");
        assert!(stdout_of(&v).contains("Starting gVisor"), "no gVisor boot log in dmesg: {v:#}");
        let (v, _) = run_json(&[], &["uname", "-r"]);
        assert_eq!(stdout_of(&v).trim(), host_release, "native runs on the host's kernel");
    }

    #[test]
    fn timeout_kills_double_forked_daemon() {
        require_runsc!();
        for b in Backend::BOTH {
            for root in Root::BOTH {
                let marker = unique("parity-daemon");
                let script = format!("{{probe}} daemon {marker} 300; exec {{probe}} sleep {marker} 300");
                let run = script_in(root, &refs(&with(b, &["--timeout", "1s"])), &script);
                // Checked at once: husk returns only after the sandbox is gone.
                let left = host_pids_with(&format!("sleep\0{marker}\0"));
                let id = run.verdict["id"].as_str().unwrap_or_default().to_string();
                let runsc_left = host_processes_naming(&id);
                assert_eq!(run.code, 124, "{b:?} {root:?}: {:#}", run.verdict);
                assert_eq!(run.verdict["termination"], "wall_timeout");
                assert_eq!(run.verdict["signal"], 9);
                assert_eq!(run.report()["ok"], true, "{b:?} {root:?}: the daemon did not start: {}", run.report());
                assert_eq!(left, Vec::<i32>::new(), "{b:?} {root:?}: sandbox processes outlived the timeout");
                assert!(!id.is_empty());
                assert_eq!(runsc_left, Vec::<String>::new(), "{b:?} {root:?}: runsc processes outlived the run");
            }
        }
    }

    #[test]
    fn kill_grace_sends_sigterm_first() {
        require_runsc!();
        for b in Backend::BOTH {
            let extra = with(b, &["--timeout", "1s", "--kill-grace", "5s"]);
            let (v, code) = run_json(
                &refs(&extra),
                &["sh", "-c", "trap 'echo got-term; exit 0' TERM; while :; do sleep 0.05; done"],
            );
            assert_eq!(code, 124, "{b:?}: {v:#}");
            assert!(stdout_of(&v).contains("got-term"), "{b:?}: {v:#}");
        }
    }

    #[test]
    fn output_to_a_file_lands_in_order() {
        require_runsc!();
        for b in Backend::BOTH {
            let dir = TempDir::new("parity-file");
            let file = dir.join("out");
            let husk = husk_bin();
            let runtime = b.args().join(" ");
            let script = format!(
                "{{ echo first; {} run {runtime} -- sh -c 'echo middle; echo err >&2'; echo last; }} > {} 2>&1",
                husk.display(),
                file.display()
            );
            let st = std::process::Command::new("sh").args(["-c", &script]).status().unwrap();
            assert!(st.success());
            let text = std::fs::read_to_string(&file).unwrap();
            assert_eq!(text, "first\nmiddle\nerr\nlast\n", "{b:?}");
        }
    }

    #[test]
    fn runsc_refuses_what_it_cannot_do_here() {
        require_runsc!();
        let (v, code) = run_json(&["--runtime", "runsc", "--runsc-platform", "no-such-platform"], &["true"]);
        assert_eq!(code, 125, "{v:#}");
        assert!(v["error"]["message"].as_str().unwrap().contains("ptrace"), "names the platforms it has: {v:#}");
        let (v, code) = run_json(&["--runtime", "runsc", "--runsc-path", "/husk-no-such-runsc"], &["true"]);
        assert_eq!(code, 125, "{v:#}");
        assert!(v["error"]["message"].as_str().unwrap().contains("/husk-no-such-runsc"), "{v:#}");
    }

    #[test]
    fn auto_picks_native_where_it_works() {
        let (v, code) = run_json(&["--runtime", "auto"], &["true"]);
        assert_eq!(code, 0, "{v:#}");
        assert_eq!(v["backend"], "native");
        assert_eq!(v["isolation"]["runtime_choice"]["chosen"], "native", "{v:#}");
    }

    /// Root inside a user namespace that maps only itself (a nested
    /// container): native cannot map the sandbox's id range there, runsc
    /// can run; auto picks runsc and says why.
    #[test]
    fn auto_picks_runsc_where_native_cannot_work() {
        require_runsc!();
        let state = TempDir::new("auto-state");
        let script = format!(
            "exec {} --state-dir {} run --json --runtime auto -- uname -v",
            husk_bin().display(),
            state.path().display()
        );
        let out = in_own_userns(&script);
        let v = verdict_of(&out);
        assert_eq!(out.status.code(), Some(0), "{v:#}");
        assert_eq!(v["backend"], "runsc", "{v:#}");
        assert_eq!(v["isolation"]["runtime_choice"]["chosen"], "runsc");
        assert!(v["isolation"]["runtime_choice"]["why"].as_str().unwrap().contains("id range"), "{v:#}");
        assert!(stdout_of(&v).contains(GVISOR_UNAME_V), "{v:#}");
    }

    /// In a user namespace whose own user.max_user_namespaces is 0 (the
    /// host's settings untouched), native cannot create its namespaces and
    /// neither can runsc's sandbox: auto refuses and names both reasons.
    #[test]
    fn auto_refuses_naming_both_reasons_when_user_namespaces_are_off() {
        require_runsc!();
        let script = format!(
            "echo 0 > /proc/sys/user/max_user_namespaces && exec {} run --json --runtime auto -- true",
            husk_bin().display()
        );
        let out = in_own_userns(&script);
        let v = verdict_of(&out);
        assert_eq!(out.status.code(), Some(125), "{v:#}");
        assert_eq!(v["termination"], "setup_failed");
        assert_eq!(v["error"]["step"], "backend", "{v:#}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("native: ") && msg.contains("runsc: "), "both reasons: {msg}");
        assert!(msg.matches("max_user_namespaces = 0").count() >= 2, "{msg}");
        // What really happens there: runsc alone fails the same way.
        let script = format!(
            "echo 0 > /proc/sys/user/max_user_namespaces && exec {} run --json --runtime runsc -- true",
            husk_bin().display()
        );
        let out = in_own_userns(&script);
        let v = verdict_of(&out);
        assert_eq!(out.status.code(), Some(125), "{v:#}");
        assert!(v["error"]["message"].as_str().unwrap().contains("max_user_namespaces = 0"), "{v:#}");
    }
}

mod root {
    use super::*;
    use std::process::{Child, Stdio};
    use std::time::Duration;

    // The limit tests need a cgroup: the rootless pass runs with
    // HUSK_NO_CGROUP=1 (this host delegates none to ordinary users).

    /// `--pids 64` bounds the workload, not gVisor's machinery: under
    /// runsc each task inside costs dozens of host tasks, which a cgroup
    /// limit of 64 counted too (20 background sleeps could not start).
    #[test]
    fn pids_limit_bounds_the_workload_under_both_backends() {
        require_root!();
        require_runsc!();
        let script = "for i in $(seq 20); do sleep 1 & done; wait; echo ok";
        for b in Backend::BOTH {
            let (v, code) = run_json(&refs(&with(b, &["--pids", "64"])), &["sh", "-c", script]);
            assert_eq!((code, stdout_of(&v).as_str()), (0, "ok\n"), "{b:?}: {v:#}");
            assert_eq!(v["limits"]["pids"]["requested"], 64, "{b:?}: {v:#}");
        }
        let (v, _) = run_json(&refs(&with(Backend::Runsc, &["--pids", "64"])), &["true"]);
        let pids = &v["limits"]["pids"];
        assert_eq!(pids["workload_limit"], 64, "{v:#}");
        assert!(pids["applied_as"].as_str().is_some_and(|s| s.contains("RLIMIT_NPROC 64")), "{v:#}");
        assert!(pids["applied"].as_u64().is_some_and(|n| n > 64), "the host cgroup holds gVisor's budget: {v:#}");
    }

    /// A fork bomb still meets the limit under both backends: inside
    /// gVisor it is RLIMIT_NPROC that stops it, with EAGAIN, as the cgroup
    /// does natively.
    #[test]
    fn fork_bomb_is_stopped_at_the_pids_limit_under_both_backends() {
        require_root!();
        require_runsc!();
        for b in Backend::BOTH {
            let run = probe_in(Root::Host, &refs(&with(b, &["--pids", "64"])), &["forkbomb", "4096"]);
            let r = run.report();
            assert_eq!(r["errno"], "EAGAIN", "{b:?}: {r} {:#}", run.verdict);
            let forked = r["forked"].as_u64().unwrap();
            assert!((40..64).contains(&forked), "{b:?}: forked {forked} under --pids 64");
        }
    }

    /// `--memory 64M` leaves the workload what it leaves natively: the
    /// host cgroup gets gVisor's sentry and gofer on top. Beyond the
    /// limit the OOM killer still ends the run under both.
    #[test]
    fn memory_limit_bounds_the_workload_under_both_backends() {
        require_root!();
        require_runsc!();
        for b in Backend::BOTH {
            let extra = with(b, &["--memory", "64M"]);
            let run = probe_in(Root::Host, &refs(&extra), &["memhog", "52M"]);
            assert_eq!((run.code, run.report()["ok"].as_bool()), (0, Some(true)), "{b:?}: {:#}", run.verdict);
            assert_eq!(run.verdict["limits"]["memory"]["requested"], 64 << 20, "{b:?}");
            let run = probe_in(Root::Host, &refs(&extra), &["memhog", "160M"]);
            assert_eq!(run.verdict["termination"], "oom_killed", "{b:?}: {:#}", run.verdict);
        }
    }

    /// An explicit `--pids` that a capability would let the command escape
    /// inside gVisor is refused, not silently weakened.
    #[test]
    fn runsc_refuses_a_pids_limit_the_command_could_escape() {
        require_root!();
        require_runsc!();
        let (v, code) = run_json(&["--runtime", "runsc", "--pids", "64", "--cap-add", "SYS_RESOURCE"], &["true"]);
        assert_eq!(code, 125, "{v:#}");
        assert_eq!(v["error"]["step"], "limits", "{v:#}");
        assert!(v["error"]["message"].as_str().unwrap().contains("CAP_SYS_RESOURCE"), "{v:#}");
        // The refusal is runsc's (a valid plan it cannot apply), so the
        // verdict names it; a plan refused before any backend could take
        // it names none.
        assert_eq!(v["backend"], "runsc", "{v:#}");
        let (v, code) = run_json(&["--runtime", "runsc", "--pids", "100000"], &["true"]);
        assert_eq!(code, 125, "{v:#}");
        assert!(v["error"]["hint"].as_str().unwrap().contains("--pids"), "{v:#}");
        let (v, code) = run_json(&["--runtime", "runsc", "--hostname", "a/b"], &["true"]);
        assert_eq!(code, 125, "{v:#}");
        assert_eq!(v["backend"], "none", "{v:#}");
    }

    /// A runsc run of `sleep 300` with its own state dir; returns the child
    /// and the run's id once its sandbox is up.
    fn start_sleeper(state: &Path) -> (Child, String) {
        let state_arg = state.display().to_string();
        let child = husk(&["--state-dir", &state_arg, "run", "--runtime", "runsc", "--", "sleep", "300"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let runs = state.join("runsc-runs");
        let mut id = String::new();
        let up = wait_until(Duration::from_secs(20), || {
            let ids: Vec<String> = std::fs::read_dir(&runs)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            if let Some(i) = ids.first() {
                id = i.clone();
            }
            !id.is_empty()
                && runs.join(&id).join("sandbox.pid").exists()
                && host_processes_naming(&id).iter().any(|p| p.contains("runsc-sandbox"))
        });
        assert!(up, "the runsc sandbox never showed up");
        (child, id)
    }

    #[test]
    fn sigkill_of_husk_leaves_no_runsc_process_and_gc_removes_its_state() {
        require_root!();
        require_runsc!();
        let state = TempDir::new("runsc-state");
        let (mut child, id) = start_sleeper(state.path());
        child.kill().unwrap();
        child.wait().unwrap();
        let gone =
            wait_until(Duration::from_secs(5), || host_processes_naming(&id).iter().all(|p| !p.contains("runsc")));
        assert!(gone, "runsc processes survived SIGKILL of husk: {:?}", host_processes_naming(&id));
        let state_arg = state.path().display().to_string();
        let out = husk(&["--state-dir", &state_arg, "gc", "--json"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["runsc"]["removed"].as_array().unwrap().iter().any(|x| x == id.as_str()), "{v:#}");
        assert!(!state.join("runsc-runs").join(&id).exists());
        let left: Vec<_> = std::fs::read_dir(state.join("runsc")).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "runsc state left: {left:?}");
    }

    #[test]
    fn gc_kills_the_sandbox_of_a_dead_husk_but_not_a_live_one() {
        require_root!();
        require_runsc!();
        let state = TempDir::new("runsc-state");
        let state_arg = state.path().display().to_string();
        let (mut child, id) = start_sleeper(state.path());
        // A live husk's run is left alone.
        let out = husk(&["--state-dir", &state_arg, "gc", "--json"]).output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["runsc"]["running"].as_array().unwrap().iter().any(|x| x == id.as_str()), "{v:#}");
        assert!(host_processes_naming(&id).iter().any(|p| p.contains("runsc-sandbox")));
        // Its owner record now names a dead process: gc must kill the sandbox.
        std::fs::write(state.join("runsc-runs").join(&id).join("owner"), "1 0\n").unwrap();
        let out = husk(&["--state-dir", &state_arg, "gc", "--json"]).output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["runsc"]["killed"].as_array().is_some_and(|k| !k.is_empty()), "{v:#}");
        assert!(v["runsc"]["removed"].as_array().unwrap().iter().any(|x| x == id.as_str()), "{v:#}");
        let status = child.wait().unwrap();
        assert!(!status.success());
        let gone =
            wait_until(Duration::from_secs(5), || host_processes_naming(&id).iter().all(|p| !p.contains("runsc")));
        assert!(gone, "{:?}", host_processes_naming(&id));
    }

    /// A private null device (c 1:3, its own inode) standing in for the
    /// host's /dev/null, and a file for stderr.
    fn private_stdio(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
        use nix::sys::stat::{Mode, SFlag, makedev, mknod};
        let null = dir.join("null");
        mknod(&null, SFlag::S_IFCHR, Mode::from_bits_truncate(0o666), makedev(1, 3)).unwrap();
        std::fs::set_permissions(&null, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
        (null, dir.join("stderr"))
    }

    fn with_stdio(mut cmd: std::process::Command, null: &Path, err: &Path) -> std::process::Output {
        let w = || std::fs::OpenOptions::new().append(true).create(true).open(err).unwrap();
        cmd.stdin(std::fs::File::open(null).unwrap())
            .stdout(std::fs::OpenOptions::new().write(true).open(null).unwrap())
            .stderr(w())
            .output()
            .unwrap()
    }

    /// runsc run as root (without --rootless) fchowns its stdio to its
    /// sandbox user: handed the host's /dev/null, it gives that device to
    /// nobody:nogroup. husk runs runsc rootless inside its own user
    /// namespace, for `run` and for `exec` into a live sandbox, so the
    /// files it is given keep their owner.
    #[test]
    fn runsc_backend_never_chowns_its_stdio() {
        require_root!();
        require_runsc!();
        let dir = TempDir::new("runsc-stdio");
        let (null, err) = private_stdio(&dir);
        let out =
            with_stdio(husk(&["run", "--runtime", "runsc", "--", "sh", "-c", "echo out; echo err >&2"]), &null, &err);
        assert!(out.status.success(), "{}", std::fs::read_to_string(&err).unwrap_or_default());
        assert_eq!((owner(&null), owner(&err)), ((0, 0), (0, 0)), "husk run --runtime runsc chowned its stdio");

        let state = TempDir::new("runsc-stdio-state");
        let state_arg = state.path().display().to_string();
        let out = husk(&["--state-dir", &state_arg, "create", "--runtime", "runsc"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let out =
            with_stdio(husk(&["--state-dir", &state_arg, "exec", &id, "--", "sh", "-c", "echo err >&2"]), &null, &err);
        let rm = husk(&["--state-dir", &state_arg, "rm", &id]).output().unwrap();
        assert!(out.status.success(), "{}", std::fs::read_to_string(&err).unwrap_or_default());
        assert!(rm.status.success(), "{}", String::from_utf8_lossy(&rm.stderr));
        assert_eq!((owner(&null), owner(&err)), ((0, 0), (0, 0)), "husk exec under runsc chowned its stdio");
        assert_eq!(std::fs::read_to_string(&err).unwrap(), "err\nerr\n");
    }

    #[test]
    fn binds_keep_their_access_under_runsc() {
        require_root!();
        require_runsc!();
        for b in Backend::BOTH {
            let dir = TempDir::new("parity-bind");
            // Writable by the sandbox's root, an unprivileged host id under
            // both backends.
            std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
            std::fs::write(dir.join("in"), "from-host\n").unwrap();
            let rw = format!("{}:/data:rw", dir.path().display());
            let ro = format!("{}:/ro", dir.path().display());
            let extra = with(b, &["--bind", &rw, "--bind", &ro]);
            let run = script_in(
                Root::Host,
                &refs(&extra),
                "{probe} read /data/in; {probe} write /data/out; {probe} write /ro/out2",
            );
            let r = &run.reports;
            assert_eq!(r.len(), 3, "{b:?}: {:#}", run.verdict);
            assert_eq!(r[0]["head"], "from-host\n", "{b:?}: {}", r[0]);
            assert_eq!(r[1]["ok"], true, "{b:?}: rw bind not writable: {}", r[1]);
            assert!(dir.join("out").exists(), "{b:?}: the write did not reach the host");
            // Sandbox root is never host root, not even for what runsc's
            // gofer creates on the host.
            assert_eq!(owner(&dir.join("out")), mapped_root(), "{b:?}");
            assert_eq!(r[2]["ok"], false, "{b:?}: ro bind writable: {}", r[2]);
            assert_eq!(r[2]["errno"], "EROFS", "{b:?}: {}", r[2]);
        }
    }
}
