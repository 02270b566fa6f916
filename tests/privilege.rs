//! What privilege a sandboxed command holds and can reach: capabilities,
//! no_new_privs, the host identity behind sandbox root, setuid binaries,
//! inherited fds and environment, the host's terminal and husk's own binary.
mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;

/// Files written through a rw bind belong on the host to the unprivileged
/// id sandbox root maps to, never to host root (also for `--user`).
#[test]
fn container_root_is_unprivileged_on_host() {
    require_root!();
    let dir = TempDir::new("owner");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bind = format!("{}:/out:rw", dir.path().display());
    let run = script_in(Root::Host, &["--bind", &bind], "{probe} write /out/f; mkdir /out/d; {probe} ids");
    assert_eq!(run.reports[0]["ok"], true, "{:#}", run.verdict);
    let (uid, gid) = mapped_root();
    assert_ne!(uid, 0);
    assert_eq!(owner(&dir.join("f")), (uid, gid), "file owner on the host");
    assert_eq!(owner(&dir.join("d")), (uid, gid), "dir owner on the host");
    assert_eq!(run.reports[1]["uid"], 0, "inside, the command is root");
    assert_eq!(run.verdict["isolation"]["user_mapping"]["sandbox_root_host_uid"], uid);

    let run = probe_in(Root::Host, &["--bind", &bind, "--user", "1000:1000"], &["write", "/out/g"]);
    assert_eq!(run.report()["ok"], true, "{:#}", run.verdict);
    assert_eq!(owner(&dir.join("g")), (uid + 1000, gid + 1000));
}

fn husk_out(args: &[&str]) -> (Option<i32>, String) {
    let o = husk(args).env_remove("HUSK_ID_RANGE").output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `--id-range 1:65536` would make sandbox root host uid 1 (`daemon`) and
/// give files the sandbox writes to the host's own accounts. As root it
/// is refused with every reason and the fix, for run and image import
/// alike; `--id-range-force` accepts it; the default and free ranges run.
#[test]
fn id_range_over_host_users_is_refused_unless_forced() {
    require_root!();
    let (code, err) = husk_out(&["run", "--id-range", "1:65536", "--", "/bin/true"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("starts below SUB_UID_MIN/SUB_GID_MIN"), "{err}");
    assert!(err.contains("overlaps host users in /etc/passwd (daemon = uid 1"), "{err}");
    assert!(err.contains("overlaps host groups in /etc/group"), "{err}");
    assert!(err.contains("--id-range-force"), "{err}");
    let store = TempDir::new("idrange-store");
    let root = store.path().to_str().unwrap();
    let (code, err) = husk_out(&["--root", root, "image", "import", "--id-range", "1:65536", "/nonexistent"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("overlaps host users"), "import checks the range before reading the source: {err}");

    // Another user's subordinate ids (scripts/test.sh's `tester` has some:
    // useradd allocates them).
    let subuid = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
    let (who, start) = subuid
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() == 3 && f[0] != "husk").then(|| (f[0].to_string(), f[1].to_string()))
        })
        .expect("an /etc/subuid entry of some user (useradd tester adds one)");
    let range = format!("{start}:10");
    let (code, err) = husk_out(&["run", "--id-range", &range, "--", "/bin/true"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains(&format!("overlaps subordinate ids in /etc/subuid ({who}'s {start}:")), "{err}");

    let (code, err) = husk_out(&["run", "--id-range", "1:65536", "--id-range-force", "--", "/bin/true"]);
    assert_eq!(code, Some(0), "forced: {err}");
    let (code, err) = husk_out(&["run", "--id-range", "2000000000:65536", "--", "/bin/true"]);
    assert_eq!(code, Some(0), "a free range: {err}");
    let (code, err) = husk_out(&["run", "--", "/bin/true"]);
    assert_eq!(code, Some(0), "the default range: {err}");
}

/// A setuid-root binary (owned by the id sandbox root maps to, so inside it
/// *is* root's) gives a `--user` command nothing: binds are nosuid and
/// no_new_privs is set.
#[test]
fn setuid_binary_gains_nothing() {
    require_root!();
    let dir = TempDir::new("suid");
    let suid = dir.join("husk-probe");
    std::fs::copy(probe_path(), &suid).unwrap();
    let (uid, gid) = mapped_root();
    nix::unistd::chown(&suid, Some(uid.into()), Some(gid.into())).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    assert_eq!(std::fs::metadata(&suid).unwrap().permissions().mode() & 0o7777, 0o4755);
    let bind = format!("{}:/suid", dir.path().display());
    for user in ["1000:1000", "65534:65534"] {
        let run = script_in(
            Root::Host,
            &["--bind", &bind, "--user", user],
            "/suid/husk-probe ids; /suid/husk-probe caps; /suid/husk-probe setuid-root; /suid/husk-probe statfs /suid",
        );
        let r = &run.reports;
        assert_eq!(r.len(), 4, "{:#}", run.verdict);
        let want: u32 = user.split(':').next().unwrap().parse().unwrap();
        assert_eq!(r[0]["euid"], want, "setuid bit honoured: {}", r[0]);
        assert_eq!(r[0]["suid"], want, "{}", r[0]);
        assert_eq!(r[1]["all_empty"], true, "{}", r[1]);
        assert_eq!(r[2]["ok"], false, "became root: {}", r[2]);
        assert_eq!(r[3]["nosuid"], true, "{}", r[3]);
    }
}

/// Root's variant of the CVE-2019-5736 check: the husk binary is owned by
/// the very id that sandbox root maps to, so file permissions alone would
/// let sandbox root write it.
#[test]
fn husk_binary_owned_by_sandbox_root_not_writable() {
    require_root!();
    let dir = TempDir::new("huskbin");
    let bin = copy_husk_to(dir.path());
    let (uid, gid) = mapped_root();
    nix::unistd::chown(&bin, Some(uid.into()), Some(gid.into())).unwrap();
    let before = std::fs::read(&bin).unwrap();
    let mut args = vec!["run".to_string(), "--json".into()];
    args.extend(Root::Host.args());
    args.extend(["--".into(), PROBE.into(), "exe-write".into()]);
    let out = std::process::Command::new(&bin).args(&args).output().unwrap();
    let v = verdict_of(&out);
    let report: serde_json::Value = serde_json::from_str(stdout_of(&v).trim()).unwrap();
    assert_eq!(report["ok"], false, "an exe was writable: {report}");
    assert!(std::fs::read(&bin).unwrap() == before, "the husk binary changed");
}

mod rootless {
    use super::common::*;
    use serde_json::Value;
    use std::os::fd::OwnedFd;
    use std::process::{Command, Stdio};

    #[test]
    fn no_capabilities_in_any_set() {
        for root in Root::BOTH {
            let run = probe_in(root, &[], &["caps"]);
            let r = run.report();
            for set in ["effective", "permitted", "inheritable", "bounding", "ambient"] {
                assert_eq!(r[set], "0000000000000000", "{root:?}: {set}: {r}");
            }
            for line in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
                assert_eq!(r["proc_status"][line], "0000000000000000", "{root:?}: {line}: {r}");
            }
            assert_eq!(run.verdict["isolation"]["capabilities"], serde_json::json!([]));
        }
        // The init (pid 1) keeps nothing either.
        let run = run_in(Root::Busybox, &[], &["sh", "-c", "grep -E '^Cap(Prm|Eff|Bnd|Amb|Inh)' /proc/1/status"]);
        let text = stdout_of(&run.verdict);
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.lines().all(|l| l.ends_with("0000000000000000")), "pid 1 holds capabilities:\n{text}");
    }

    /// Syscalls that need a capability fail with EPERM.
    #[test]
    fn capability_gated_syscalls_are_denied() {
        let names = [
            "mount",
            "umount2",
            "pivot_root",
            "chroot",
            "unshare",
            "setns",
            "open_by_handle_at",
            "fsopen",
            "open_tree",
            "move_mount",
            "mount_setattr",
            "socket-raw",
            "socket-packet",
            "reboot",
            "swapon",
            "acct",
            "settimeofday",
            "clock_settime",
            "adjtimex",
            "ptrace-attach-1",
        ];
        let script: Vec<String> = names.iter().map(|n| format!("{{probe}} try-syscall {n};")).collect();
        let run = script_in(Root::Host, &[], &script.join(" "));
        assert_eq!(run.reports.len(), names.len(), "{:#}", run.verdict);
        for (n, r) in names.iter().zip(&run.reports) {
            assert_eq!(r["ok"], false, "{n} succeeded: {r}");
            assert_eq!(r["errno"], "EPERM", "{n}: {r}");
        }
    }

    #[test]
    fn no_new_privs_is_set() {
        for root in Root::BOTH {
            let run = probe_in(root, &[], &["caps"]);
            assert_eq!(run.report()["no_new_privs"], true, "{root:?}");
            assert_eq!(run.report()["proc_status"]["NoNewPrivs"], "1", "{root:?}");
            assert_eq!(run.verdict["isolation"]["no_new_privs"], true);
        }
    }

    /// Rootless: sandbox root is the invoking user on the host (the map
    /// holds exactly that one id). As root see
    /// container_root_is_unprivileged_on_host.
    #[test]
    fn rw_bind_files_belong_to_the_mapped_user() {
        let dir = TempDir::new("rwbind");
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let bind = format!("{}:/out:rw", dir.path().display());
        let run = probe_in(Root::Busybox, &["--bind", &bind], &["write", "/out/f"]);
        assert_eq!(run.report()["ok"], true, "{:#}", run.verdict);
        let (uid, gid) = mapped_root();
        assert_eq!(owner(&dir.join("f")), (uid, gid));
        if !is_root() {
            assert_eq!(uid, nix::unistd::getuid().as_raw());
        }
    }

    /// Only 0, 1 and 2 are open in the command, even though husk itself
    /// inherited extra fds (a shell opens 7 and 8 and execs husk).
    #[test]
    fn no_fd_leaks() {
        let dir = TempDir::new("fds");
        let verdict_file = format!("--verdict-file={}", dir.join("v.json").display());
        for root in Root::BOTH {
            for mode in ["--json", verdict_file.as_str()] {
                let mut cmd: Vec<String> = vec!["run".into(), mode.into()];
                cmd.extend(root.args());
                cmd.extend(["--".into(), root.probe().into(), "fds".into()]);
                let out = Command::new("sh")
                    .arg("-c")
                    .arg(r#"exec 7</etc/hostname 8>/dev/null 9<&0; exec "$0" "$@""#)
                    .arg(husk_bin())
                    .args(&cmd)
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                let line = if mode == "--json" {
                    stdout_of(&serde_json::from_str::<Value>(text.trim()).expect("verdict"))
                } else {
                    text
                };
                let r: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
                assert_eq!(r["fds"], serde_json::json!([0, 1, 2]), "{root:?} {mode}: leaked fds: {r}");
            }
        }
    }

    /// The init is a fork of husk: its /proc/1/cmdline (world-readable)
    /// must not show husk's host command line (host paths, --env values).
    #[test]
    fn host_command_line_not_visible_as_pid1() {
        let marker = unique("host-arg");
        let (v, _) = run_json(
            &["--env", &format!("TOKEN={marker}"), "--bind", &format!("/tmp:/{marker}")],
            &["sh", "-c", "cat /proc/1/cmdline; echo; ps -o pid,args 2>/dev/null; true"],
        );
        let out = stdout_of(&v);
        assert!(out.starts_with("husk:[init]"), "{out}");
        assert!(!out.lines().next().unwrap_or("").contains(&marker), "pid 1 shows husk's arguments: {out}");
    }

    #[test]
    fn host_env_not_leaked() {
        let secret = unique("secret-value");
        let mut args: Vec<String> = vec!["run".into(), "--json".into()];
        args.extend(Root::Host.args());
        args.extend(["--env".into(), "GIVEN=yes".into(), "--".into()]);
        args.extend(["sh".into(), "-c".into(), format!("{PROBE} env; cat /proc/self/environ /proc/1/environ; true")]);
        let out = husk(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .env("HUSK_TEST_SECRET", &secret)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .output()
            .unwrap();
        let v = verdict_of(&out);
        let text = stdout_of(&v) + &stderr_of(&v);
        assert!(!text.contains(&secret), "host env leaked into the sandbox:\n{text}");
        let env: Value = serde_json::from_str(stdout_of(&v).lines().next().unwrap()).unwrap();
        let keys: Vec<&String> = env["env"].as_object().unwrap().keys().collect();
        for k in &keys {
            assert!(["PATH", "HOME", "LANG", "TERM", "GIVEN", "PWD", "SHLVL"].contains(&k.as_str()), "{k} in {keys:?}");
        }
        assert_eq!(env["env"]["GIVEN"], "yes");
        // KEY without a value copies it from husk's environment: explicit only.
        let out = husk(&["run", "--json", "--env", "HUSK_TEST_SECRET", "--", "sh", "-c", "echo $HUSK_TEST_SECRET"])
            .env("HUSK_TEST_SECRET", &secret)
            .output()
            .unwrap();
        assert_eq!(stdout_of(&verdict_of(&out)).trim(), secret);
    }

    /// CVE-2017-5226: with the host's terminal as stdin (and as husk's
    /// controlling terminal), the command cannot push input into it.
    #[test]
    fn no_controlling_tty_of_host() {
        let pty = nix::pty::openpty(None, None).expect("openpty");
        let slave = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
        // Control: a process whose controlling terminal it is can inject
        // (when the kernel still allows TIOCSTI at all).
        let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").map(|s| s.trim() == "1");
        if legacy.unwrap_or(true) {
            let out =
                Command::new("setsid").arg("-c").arg(probe_path()).arg("tiocsti").stdin(slave(&pty.slave)).output();
            let r: Value = serde_json::from_slice(&out.unwrap().stdout).unwrap();
            assert_eq!(r["fds"][0]["ok"], true, "control: TIOCSTI on own ctty failed: {r}");
        }
        for root in Root::BOTH {
            let mut args: Vec<String> = vec!["run".into(), "--json".into()];
            args.extend(root.args());
            let p = root.probe();
            args.extend(["--".into(), "sh".into(), "-c".into(), format!("{p} tiocsti; {p} tty")]);
            let out =
                Command::new("setsid").arg("-c").arg(husk_bin()).args(&args).stdin(slave(&pty.slave)).output().unwrap();
            let v = verdict_of(&out);
            let lines: Vec<Value> = stdout_of(&v).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            assert_eq!(lines.len(), 2, "{v:#}");
            let fd0 = &lines[0]["fds"][0];
            assert_eq!(fd0["ok"], false, "{root:?}: TIOCSTI into the host tty worked: {}", lines[0]);
            assert!(["EPERM", "EIO"].contains(&fd0["errno"].as_str().unwrap()), "{root:?}: {fd0}");
            assert_eq!(lines[1]["isatty"][0], true, "{root:?}: stdin should be the tty: {}", lines[1]);
            assert_eq!(lines[1]["controlling_tty"], false, "{root:?}: {}", lines[1]);
        }
    }

    /// CVE-2019-5736: neither /proc/self/exe nor /proc/1/exe (husk's init)
    /// opens for writing. The husk binary here is a copy owned by the
    /// invoking user, which rootless is the very id sandbox root maps to.
    #[test]
    fn husk_binary_not_writable_from_inside() {
        let dir = TempDir::new("huskexe");
        let bin = copy_husk_to(dir.path());
        let before = std::fs::read(&bin).unwrap();
        for root in Root::BOTH {
            let mut args: Vec<String> = vec!["run".into(), "--json".into()];
            args.extend(root.args());
            args.extend(["--".into(), root.probe().into(), "exe-write".into()]);
            let out = Command::new(&bin).args(&args).stdin(Stdio::null()).output().unwrap();
            let v = verdict_of(&out);
            let r: Value = serde_json::from_str(stdout_of(&v).trim()).unwrap();
            assert_eq!(r["ok"], false, "{root:?}: an exe opened for writing: {r}");
            assert_eq!(r["opens"].as_array().unwrap().len(), 4);
        }
        assert!(std::fs::read(&bin).unwrap() == before, "the husk binary changed");
    }
}
