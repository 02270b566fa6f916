//! What a sandboxed command can see and touch: the filesystem, the network,
//! other processes, SysV IPC, the hostname, /proc and /dev. Every test runs
//! as root and, through `mod rootless`, as an unprivileged user.
mod common;

mod rootless {
    use super::common::*;
    use serde_json::Value;
    use std::io::ErrorKind;
    use std::net::TcpListener;
    use std::process::Command;

    fn errno(v: &Value) -> &str {
        v["errno"].as_str().unwrap_or("")
    }

    #[test]
    fn root_is_read_only() {
        for root in Root::BOTH {
            let targets = ["/x", "/etc/x", "/usr/x", "/bin/x", "/etc/passwd", "/bin/sh"];
            let script: Vec<String> = targets.iter().map(|t| format!("{{probe}} write {t};")).collect();
            let script = format!("{} {{probe}} statfs /; {{probe}} statfs /etc", script.join(" "));
            let run = script_in(root, &[], &script);
            assert_eq!(run.reports.len(), targets.len() + 2, "{root:?}: {:#}", run.verdict);
            for (t, r) in targets.iter().zip(&run.reports) {
                assert_eq!(r["ok"], false, "{root:?}: writing {t} succeeded: {r}");
                assert!(["EROFS", "EACCES", "EPERM"].contains(&errno(r)), "{root:?}: {t}: {r}");
            }
            for r in &run.reports[targets.len()..] {
                assert_eq!(r["read_only"], true, "{root:?}: {r}");
                assert_eq!(r["nosuid"], true, "{root:?}: {r}");
            }
        }
        assert!(!busybox_rootfs().join("x").exists(), "a write reached the rootfs directory on the host");
    }

    #[test]
    fn workdir_and_tmp_are_writable_and_bounded() {
        for root in Root::BOTH {
            let extra = ["--tmp-size", "8M", "--workdir-size", "16M"];
            let run = script_in(
                root,
                &extra,
                "{probe} cwd; {probe} write /tmp/a; {probe} write ./a; \
                 {probe} fill /tmp/big 9M; {probe} fill /workspace/big 17M; \
                 {probe} statfs /tmp; {probe} statfs /workspace",
            );
            let r = &run.reports;
            assert_eq!(r.len(), 7, "{root:?}: {:#}", run.verdict);
            assert_eq!(r[0]["getcwd"], "/workspace", "{root:?}");
            assert_eq!(r[1]["ok"], true, "{root:?}: /tmp not writable: {}", r[1]);
            assert_eq!(r[2]["ok"], true, "{root:?}: workdir not writable: {}", r[2]);
            for (rep, limit) in [(&r[3], 8u64 << 20), (&r[4], 16u64 << 20)] {
                assert_eq!(rep["ok"], false, "{root:?}: wrote past the size limit: {rep}");
                assert_eq!(errno(rep), "ENOSPC", "{root:?}: {rep}");
                let written = rep["written"].as_u64().unwrap();
                assert!(written <= limit && written > limit / 2, "{root:?}: wrote {written} of limit {limit}");
            }
            for rep in &r[5..] {
                assert_eq!(rep["read_only"], false, "{root:?}: {rep}");
                assert_eq!(rep["nosuid"], true, "{root:?}: {rep}");
                assert_eq!(rep["nodev"], true, "{root:?}: {rep}");
            }
        }
        let run = probe_in(Root::Host, &["--workdir", "/work2"], &["cwd"]);
        assert_eq!(run.report()["getcwd"], "/work2");
    }

    #[test]
    fn only_loopback_exists() {
        for root in Root::BOTH {
            let run = probe_in(root, &[], &["ifaces"]);
            let r = run.report();
            assert_eq!(r["names"], serde_json::json!(["lo"]), "{root:?}: {r}");
            assert_eq!(r["interfaces"][0]["up"], true, "{root:?}: lo is down: {r}");
            assert_eq!(run.verdict["isolation"]["network"], "none");
        }
    }

    /// Confined to one cpu, the sandbox still gets a network of its own with
    /// lo up, and its command is pid 2: nothing in the init's setup may
    /// depend on a second cpu or take a pid before the command.
    #[test]
    fn one_cpu_still_gets_a_private_network_and_pid_2() {
        let Ok(allowed) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
            return skip("sched_getaffinity failed");
        };
        let cpu = (0..nix::sched::CpuSet::count()).find(|&c| allowed.is_set(c).unwrap_or(false)).unwrap();
        let root = Root::Busybox;
        let mut args = vec!["-c".to_string(), cpu.to_string(), husk_bin().display().to_string()];
        args.extend(["run".into(), "--json".into()]);
        args.extend(root.args());
        args.extend(["--".into(), "sh".into(), "-c".into(), format!("echo $$; {} ifaces", root.probe())]);
        let out = match Command::new("taskset").args(&args).stdin(std::process::Stdio::null()).output() {
            Ok(out) => out,
            Err(e) => return skip(&format!("taskset (util-linux) cannot run: {e}")),
        };
        let v = verdict_of(&out);
        assert_eq!(v["exit_code"], 0, "{v:#}");
        let text = stdout_of(&v);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("2"), "the command is not pid 2: {text}");
        let r: Value = serde_json::from_str(lines.next().unwrap_or("")).expect("ifaces report");
        assert_eq!(r["names"], serde_json::json!(["lo"]), "{r}");
        assert_eq!(r["interfaces"][0]["up"], true, "lo is down: {r}");
    }

    #[test]
    fn host_loopback_listener_unreachable() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen on host loopback");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let run = probe(&["connect", &addr]);
        let r = run.report();
        assert_eq!(r["ok"], false, "sandbox reached the host's {addr}: {r}");
        assert_eq!(errno(r), "ECONNREFUSED", "{r}");
        match listener.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("host listener saw a connection: {other:?}"),
        }
        // Control: with the host's network the same probe does connect.
        let run = probe_in(Root::Host, &["--network", "host"], &["connect", &addr]);
        assert_eq!(run.report()["ok"], true, "control failed: {}", run.report());
        assert_eq!(run.verdict["isolation"]["network"], "host");
    }

    #[test]
    fn host_processes_invisible() {
        let marker = unique("hostproc");
        let mut host = Command::new(probe_path()).args(["sleep", &marker, "30"]).spawn().expect("host probe");
        assert!(wait_until(std::time::Duration::from_secs(5), || !host_pids_with(&marker).is_empty()));
        for root in Root::BOTH {
            let run = probe_in(root, &[], &["ps"]);
            let procs = run.report()["processes"].as_array().unwrap().clone();
            let pids: Vec<i64> = procs.iter().map(|p| p["pid"].as_i64().unwrap()).collect();
            assert_eq!(pids, vec![1, 2], "{root:?}: the sandbox sees other processes: {procs:?}");
            assert_eq!(procs[0]["comm"], "husk:[init]", "{root:?}");
            assert!(!procs.iter().any(|p| p["cmdline"].as_str().unwrap_or("").contains(&marker)));
        }
        let _ = host.kill();
        let _ = host.wait();
    }

    #[test]
    fn host_sysv_ipc_invisible() {
        let out = Command::new("ipcmk").args(["-M", "4096"]).output().expect("ipcmk (util-linux)");
        let text = String::from_utf8_lossy(&out.stdout);
        let id: i64 = text.rsplit(':').next().and_then(|s| s.trim().parse().ok()).unwrap_or_else(|| panic!("{text}"));
        let host_view = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
        let visible_on_host =
            host_view.lines().skip(1).any(|l| l.split_whitespace().nth(1) == Some(id.to_string().as_str()));
        let run = probe(&["ipc"]);
        let _ = Command::new("ipcrm").args(["-m", &id.to_string()]).status();
        assert!(visible_on_host, "control: host segment {id} not in /proc/sysvipc/shm");
        let r = run.report();
        for kind in ["msg", "shm", "sem"] {
            assert_eq!(r[kind]["ids"], serde_json::json!([]), "{kind}: {r}");
            assert_eq!(r[kind]["proc_ids"], serde_json::json!([]), "{kind}: {r}");
        }
    }

    #[test]
    fn hostname_isolated() {
        let host_before = nix::unistd::gethostname().unwrap();
        let run = probe(&["hostname"]);
        assert_eq!(run.report()["hostname"], "husk");
        let name = "probe-box";
        let run = probe_in(Root::Busybox, &["--hostname", name], &["hostname"]);
        assert_eq!(run.report()["hostname"], name);
        assert_eq!(run.report()["proc"], name);
        assert_eq!(nix::unistd::gethostname().unwrap(), host_before, "the host's hostname changed");
    }

    #[test]
    fn proc_sensitive_paths_masked() {
        // Files that exist on this host must read empty (or not at all) inside.
        let files = [
            "/proc/kcore",
            "/proc/keys",
            "/proc/key-users",
            "/proc/timer_list",
            "/proc/sched_debug",
            "/proc/kmsg",
            "/proc/kpagecount",
            "/proc/kpageflags",
            "/proc/sysrq-trigger",
            "/proc/latency_stats",
        ];
        let present: Vec<&str> = files.iter().copied().filter(|f| std::path::Path::new(f).exists()).collect();
        assert!(!present.is_empty());
        let mut script: Vec<String> = present.iter().map(|f| format!("{{probe}} read {f};")).collect();
        for w in [
            "/proc/sysrq-trigger",
            "/proc/sys/kernel/hostname",
            "/proc/sys/vm/drop_caches",
            "/sys/kernel/uevent_helper",
        ] {
            script.push(format!("{{probe}} write {w};"));
        }
        let dirs = ["/proc/acpi", "/proc/scsi", "/proc/driver", "/sys/firmware", "/sys/kernel/security"];
        script.push(format!("ls -A {} 2>/dev/null | grep -v ':$' | grep -c . ; true", dirs.join(" ")));
        let run = script_in(Root::Host, &[], &script.join(" "));
        let reports = &run.reports;
        for (f, r) in present.iter().zip(reports) {
            let leaked = r["ok"] == true && r["bytes"].as_u64().unwrap_or(0) > 0;
            assert!(!leaked, "{f} is readable inside: {r}");
        }
        for r in &reports[present.len()..] {
            assert_eq!(r["ok"], false, "write allowed: {r}");
        }
        let listed = stdout_of(&run.verdict).lines().last().unwrap_or("").trim().to_string();
        assert_eq!(listed, "0", "masked directories are not empty: {:#}", run.verdict);
    }

    #[test]
    fn cannot_mknod() {
        for root in Root::BOTH {
            let run = script_in(root, &[], "{probe} mknod /tmp/null2; {probe} mknod ./null2; {probe} mknod /dev/shm/n");
            assert_eq!(run.reports.len(), 3, "{:#}", run.verdict);
            for r in &run.reports {
                assert_eq!(r["ok"], false, "{root:?}: mknod worked: {r}");
                assert_eq!(errno(r), "EPERM", "{root:?}: {r}");
            }
        }
    }

    #[test]
    fn dev_holds_only_the_minimal_nodes() {
        let run = run_in(Root::Busybox, &[], &["sh", "-c", "ls -A /dev; ls -A /dev/pts"]);
        let mut names: Vec<String> = stdout_of(&run.verdict).split_whitespace().map(String::from).collect();
        names.sort();
        let allowed = [
            "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty",
            "urandom", "zero",
        ];
        for n in &names {
            assert!(allowed.contains(&n.as_str()), "unexpected /dev entry {n:?} in {names:?}");
        }
        for must in ["null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm"] {
            assert!(names.iter().any(|n| n == must), "/dev/{must} missing: {names:?}");
        }
    }
}
