//! husk as an OCI runtime (src/oci/): the lifecycle the containerd shim and
//! dockerd drive, on the real kernel, with a busybox bundle. Root only
//! (cgroups, namespaces); engine-driven tests (docker, ctr) live in the
//! tests/oci_*.rs files.

mod common;

use common::{TempDir, busybox_rootfs, husk_bin, is_root, skip};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Bundle {
    dir: TempDir,
}

impl Bundle {
    /// A bundle with a private copy of the busybox root and a config like
    /// `runc spec`'s (pid, ipc, uts, mount, network namespaces; proc, /dev
    /// tmpfs, devpts, sysfs), running `script` with sh.
    fn new(tag: &str, script: &str) -> Bundle {
        let dir = TempDir::new(tag);
        let st = Command::new("cp").arg("-a").arg(busybox_rootfs()).arg(dir.path().join("rootfs")).status().unwrap();
        assert!(st.success());
        let b = Bundle { dir };
        b.write(config(script, &format!("/husk-ocicore/{tag}-{}", std::process::id())));
        b
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn root(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    fn write(&self, c: Value) {
        std::fs::write(self.path().join("config.json"), serde_json::to_vec_pretty(&c).unwrap()).unwrap();
    }
    fn edit(&self, f: impl FnOnce(&mut Value)) {
        let mut c: Value = serde_json::from_slice(&std::fs::read(self.path().join("config.json")).unwrap()).unwrap();
        f(&mut c);
        self.write(c);
    }
    /// `husk --root R --log L --log-format json ARGS` (the shim's form).
    /// stdout/stderr go to files, not pipes: after `create` they are the
    /// container's, held open by its init (a pipe would never see EOF).
    fn husk(&self, args: &[&str]) -> Output {
        self.husk_with(&husk_bin(), args)
    }
    fn husk_with(&self, bin: &Path, args: &[&str]) -> Output {
        let root = self.root();
        let log = self.path().join("log.json");
        let (out, err) = (self.path().join("out"), self.path().join("err"));
        // New files every call, not truncated ones: after `create` the old
        // ones are the container's stdout/stderr, and its writes (the
        // script's `echo $$`) would land in this call's output.
        let _ = std::fs::remove_file(&out);
        let _ = std::fs::remove_file(&err);
        let status = Command::new(bin)
            .args(["--root", root.to_str().unwrap(), "--log", log.to_str().unwrap(), "--log-format", "json"])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .status()
            .unwrap();
        Output { status, stdout: std::fs::read(&out).unwrap(), stderr: std::fs::read(&err).unwrap() }
    }
    fn ok(&self, args: &[&str]) -> String {
        let out = self.husk(args);
        assert!(out.status.success(), "husk {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn state(&self, id: &str) -> Value {
        serde_json::from_str(&self.ok(&["state", id])).unwrap()
    }
}

fn config(script: &str, cgroups_path: &str) -> Value {
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh", "-c", script],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "capabilities": {"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"], "permitted": ["CAP_KILL"]},
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": false},
        "hostname": "ocicore",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}
        ],
        "linux": {
            "cgroupsPath": cgroups_path,
            "resources": {"devices": [{"allow": false, "access": "rwm"}], "pids": {"limit": 64}},
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": ["/proc/kcore", "/sys/firmware"],
            "readonlyPaths": ["/proc/sys"]
        }
    })
}

macro_rules! require_root {
    () => {
        if !is_root() {
            skip("needs root (cgroups, namespaces)");
            return;
        }
    };
}

#[test]
fn create_leaves_init_to_subreaper_and_pid_file_has_no_newline() {
    require_root!();
    let b = Bundle::new("ocicore-reap", "exit 7");
    // As the containerd shim is: a subreaper that reaps init itself.
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let pid_file = b.path().join("init.pid");
    b.ok(&["create", "--bundle", b.path().to_str().unwrap(), "--pid-file", pid_file.to_str().unwrap(), "reap"]);
    let text = std::fs::read_to_string(&pid_file).unwrap();
    assert!(
        !text.is_empty() && text.bytes().all(|c| c.is_ascii_digit()),
        "pid file {text:?}: bare decimal, no newline"
    );
    let pid: i32 = text.parse().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let ppid: i32 = stat[stat.rfind(')').unwrap() + 2..].split(' ').nth(1).unwrap().parse().unwrap();
    assert_eq!(ppid, std::process::id() as i32, "init is the caller's (the subreaper's) child once create returned");
    assert_eq!(b.state("reap")["status"], "created");
    assert_eq!(b.state("reap")["pid"], pid);
    b.ok(&["start", "reap"]);
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 7),
        "the shim reaps the exit status"
    );
    assert_eq!(b.state("reap")["status"], "stopped");
    b.ok(&["delete", "reap"]);
}

#[test]
fn lifecycle_state_kill_delete_follow_runcs_contract() {
    require_root!();
    let b = Bundle::new("ocicore-life", "echo $$; exec sleep 1000");
    b.ok(&["create", "--bundle", b.path().to_str().unwrap(), "life"]);
    let s = b.state("life");
    // runc omits `annotations` when there are none (omitempty; the spec's
    // state schema has it optional): oci_cli's state test compares keys.
    for k in ["ociVersion", "id", "pid", "status", "bundle", "rootfs", "created", "owner"] {
        assert!(s.get(k).is_some(), "state lacks {k}: {s}");
    }
    assert_eq!(s["status"], "created");
    let cg = PathBuf::from(format!("/sys/fs/cgroup/pids/husk-ocicore/ocicore-life-{}", std::process::id()));
    assert_eq!(std::fs::read_to_string(cg.join("pids.max")).unwrap().trim(), "64", "resources applied at cgroupsPath");
    b.ok(&["start", "life"]);
    assert_eq!(b.state("life")["status"], "running");
    let out = b.husk(&["start", "life"]);
    assert!(!out.status.success(), "a second start is refused");
    b.ok(&["kill", "life", "KILL"]);
    assert!(common::wait_until(std::time::Duration::from_secs(10), || b.state("life")["status"] == "stopped"));
    let out = b.husk(&["kill", "life", "15"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("container not running"), "{out:?}");
    let log = std::fs::read_to_string(b.path().join("log.json")).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!((last["level"].as_str(), last["msg"].as_str()), (Some("error"), Some("container not running")));
    b.ok(&["kill", "--all", "life", "9"]);
    b.ok(&["delete", "life"]);
    assert!(!cg.exists(), "delete removes the cgroup");
    for verb in [&["state", "life"][..], &["delete", "life"], &["kill", "life", "9"], &["start", "life"]] {
        let out = b.husk(verb);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("container life does not exist"), "{verb:?}: {out:?}");
    }
}

#[test]
fn run_gives_the_exit_code_and_the_spec_isolation_holds() {
    require_root!();
    let b = Bundle::new(
        "ocicore-iso",
        "test \"$(hostname)\" = ocicore || exit 10; \
         cat /dev/null || exit 11; \
         echo x > /proc/sys/kernel/domainname 2>/dev/null && exit 12; \
         test -s /proc/kcore && exit 13; \
         grep -q CapEff:.0000000000000020 /proc/self/status || exit 14; \
         test \"$(cat /proc/1/cmdline | tr '\\0' ' ')\" != '' || exit 15; \
         exit 42",
    );
    let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), "iso"]);
    assert_eq!(out.status.code(), Some(42), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(b.husk(&["state", "iso"]).status.code() != Some(0), "run without --detach deletes the container");
}

#[test]
fn seccomp_of_the_spec_is_enforced() {
    require_root!();
    let b = Bundle::new("ocicore-sc", "mkdir /tmp/x 2>/dev/null && exit 1; exit 0");
    b.edit(|c| {
        c["linux"]["seccomp"] = json!({
            "defaultAction": "SCMP_ACT_ALLOW",
            "architectures": ["SCMP_ARCH_X86_64"],
            "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]
        })
    });
    let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), "sc"]);
    assert_eq!(out.status.code(), Some(0), "mkdir was not denied: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn hooks_run_in_order_with_state_on_stdin() {
    require_root!();
    let b = Bundle::new("ocicore-hooks", "true");
    let log = b.path().join("hooks.log");
    let host_hook = |name: &str| json!({"path": "/bin/sh", "args": ["sh", "-c", format!("echo {name} $(cat) >> {}", log.display())]});
    std::fs::create_dir_all(b.path().join("rootfs/out")).unwrap();
    b.edit(|c| {
        c["hooks"] = json!({
            "prestart": [host_hook("prestart")],
            "createRuntime": [host_hook("createRuntime")],
            "createContainer": [host_hook("createContainer")],
            "startContainer": [{"path": "/bin/sh", "args": ["sh", "-c", "echo startContainer $(cat) >> /out/hooks.log"]}],
            "poststart": [host_hook("poststart")],
            "poststop": [host_hook("poststop")]
        });
        c["mounts"].as_array_mut().unwrap().push(json!({"destination": "/out", "type": "bind", "source": b.path(), "options": ["rbind"]}));
    });
    b.ok(&["create", "--bundle", b.path().to_str().unwrap(), "hooks"]);
    b.ok(&["start", "hooks"]);
    assert!(common::wait_until(std::time::Duration::from_secs(10), || b.state("hooks")["status"] == "stopped"));
    b.ok(&["delete", "hooks"]);
    let text = std::fs::read_to_string(&log).unwrap();
    let names: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(names, ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"]);
    for line in text.lines() {
        let state: Value = serde_json::from_str(line.split_once(' ').unwrap().1).unwrap();
        assert_eq!(state["id"], "hooks", "{line}");
        assert!(state["pid"].as_i64().unwrap() > 0, "{line}");
    }
}

#[test]
fn join_namespace_by_path_pod_style() {
    require_root!();
    let pause = Bundle::new("ocicore-pause", "exec sleep 1000");
    pause.ok(&["create", "--bundle", pause.path().to_str().unwrap(), "pause"]);
    pause.ok(&["start", "pause"]);
    let pid = pause.state("pause")["pid"].as_i64().unwrap();
    let net = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    let ipc = std::fs::read_link(format!("/proc/{pid}/ns/ipc")).unwrap();
    let b = Bundle::new("ocicore-member", "readlink /proc/self/ns/net; readlink /proc/self/ns/ipc");
    b.edit(|c| {
        c["linux"]["namespaces"] = json!([
            {"type": "pid"}, {"type": "uts"}, {"type": "mount"},
            {"type": "network", "path": format!("/proc/{pid}/ns/net")},
            {"type": "ipc", "path": format!("/proc/{pid}/ns/ipc")}
        ]);
    });
    let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), "member"]);
    pause.ok(&["delete", "--force", "pause"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(seen, format!("{}\n{}\n", net.display(), ipc.display()));
}

#[test]
fn bad_config_is_refused_with_the_field_named_and_leaves_nothing() {
    require_root!();
    let b = Bundle::new("ocicore-bad", "true");
    b.edit(|c| c["linux"]["sysctl"] = json!({"kernel.panic": "1"}));
    let out = b.husk(&["create", "--bundle", b.path().to_str().unwrap(), "bad"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("linux.sysctl") && err.contains("kernel.panic"), "{err}");
    assert!(!b.root().join("bad").exists(), "a refused create leaves no state");
}

/// CVE-2024-21626's shape: init held a directory fd of the host (the state
/// dir) when it called chdir(process.cwd), so a cwd of /proc/self/fd/N put
/// the container's process in the host's filesystem. Every N from 3 to 20,
/// for create/run and for exec: the process never runs with a host cwd
/// (its write to ../../../../tmp lands nowhere on the host), and a refused
/// cwd is create's (or exec's) error naming process.cwd.
#[test]
fn oci_cwd_through_leaked_fd_cannot_reach_host() {
    require_root!();
    let marker = format!("husk-ocicore-leak-{}", std::process::id());
    let host_marker = Path::new("/tmp").join(&marker);
    let _ = std::fs::remove_file(&host_marker);
    let attack = format!("echo x > ../../../../../../../../tmp/{marker}; ls ../../../../../../../../");
    let b = Bundle::new("ocicore-cwd", &attack);
    for n in 3..=20 {
        let cwd = format!("/proc/self/fd/{n}");
        b.edit(|c| c["process"]["cwd"] = json!(cwd));
        let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), &format!("cwd{n}")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!host_marker.exists(), "cwd {cwd}: the container wrote {} on the host ({err})", host_marker.display());
        if !out.status.success() {
            assert!(
                err.contains("process.cwd") && err.contains(&cwd),
                "cwd {cwd}: create's error names the cwd: {err}"
            );
        }
    }
    let b = Bundle::new("ocicore-cwdexec", "exec sleep 1000");
    b.ok(&["run", "--detach", "--bundle", b.path().to_str().unwrap(), "victim"]);
    let _cleanup = Deleted(&b, "victim");
    for n in 3..=20 {
        let cwd = format!("/proc/self/fd/{n}");
        let out = b.husk(&["exec", "--cwd", &cwd, "victim", "sh", "-c", &attack]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!host_marker.exists(), "exec --cwd {cwd}: wrote {} on the host ({err})", host_marker.display());
    }
    b.ok(&["delete", "--force", "victim"]);
}

/// What init holds while it waits for `start`, and what the container's
/// processes hold once they run: stdio, and only husk's own channel, log
/// and exec.fifo before execve, never a directory (CVE-2024-21626; runc's
/// fd-leak test walks /proc/<pid>/fd the same way).
#[test]
fn oci_container_fds_are_only_stdio() {
    require_root!();
    let b = Bundle::new("ocicore-fds", "exec sleep 1000");
    b.ok(&["create", "--bundle", b.path().to_str().unwrap(), "fds"]);
    let _cleanup = Deleted(&b, "fds");
    let pid = b.state("fds")["pid"].as_i64().unwrap();
    let fifo = b.root().join("fds/exec.fifo");
    let log = b.path().join("log.json");
    let fds = |pid: i64| -> Vec<(i32, PathBuf, bool)> {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let n: i32 = e.file_name().to_str().unwrap().parse().unwrap();
                let is_dir = std::fs::metadata(e.path()).is_ok_and(|m| m.is_dir());
                (n, std::fs::read_link(e.path()).unwrap_or_default(), is_dir)
            })
            .collect()
    };
    for (n, target, is_dir) in fds(pid) {
        assert!(!is_dir, "init holds fd {n} -> {} (a directory) while it waits for start", target.display());
        let allowed = n <= 2 || target == fifo || target == log || target.to_string_lossy().starts_with("socket:");
        assert!(allowed, "init holds fd {n} -> {}", target.display());
    }
    b.ok(&["start", "fds"]);
    let out = b.husk(&[
        "exec",
        "--detach",
        "--pid-file",
        b.path().join("exec.pid").to_str().unwrap(),
        "fds",
        "sleep",
        "1000",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let exec_pid: i64 = std::fs::read_to_string(b.path().join("exec.pid")).unwrap().parse().unwrap();
    for p in [pid, exec_pid] {
        let held: Vec<_> = fds(p).into_iter().filter(|(n, _, _)| *n > 2).collect();
        assert!(held.is_empty(), "pid {p} holds more than stdio: {held:?}");
    }
    b.ok(&["delete", "--force", "fds"]);
}

/// CVE-2019-5736's shape, against a copy of husk: a privileged process in
/// the container (CAP_SYS_PTRACE: being non-dumpable does not stop it)
/// opens /proc/1/exe while init is still husk (between create and start),
/// and once init has exec'd and no husk runs any more, reopens it for
/// writing and appends. The copy must not change.
#[test]
fn oci_exec_cannot_overwrite_host_binary() {
    require_root!();
    let b = Bundle::new("ocicore-exe", "exec sleep 1000");
    let bin_dir = TempDir::new("ocicore-exe-bin");
    let bin = common::copy_husk_to(bin_dir.path());
    let before = std::fs::read(&bin).unwrap();
    // Every capability we hold (a CI runner's bounding set may lack some).
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let bnd = status.lines().find_map(|l| l.strip_prefix("CapBnd:")).unwrap().trim();
    let bnd = u64::from_str_radix(bnd, 16).unwrap();
    let all: Vec<String> = (0..=40).filter(|n| bnd & (1 << n) != 0).filter_map(cap_name).map(str::to_string).collect();
    b.edit(|c| {
        c["process"]["capabilities"] = json!({"bounding": all, "effective": all, "permitted": all});
        c["process"]["noNewPrivileges"] = json!(false);
    });
    let bundle = b.path().to_str().unwrap();
    let out = b.husk_with(&bin, &["create", "--bundle", bundle, "exe"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _cleanup = Deleted(&b, "exe");
    let attack = "exec 3</proc/1/exe || { echo noopen > /result; exit; }; \
                  while [ ! -e /go ]; do sleep 0.05; done; \
                  if echo EVIL >> /proc/self/fd/3; then echo wrote > /result; else echo refused > /result; fi";
    let out = b.husk_with(&bin, &["exec", "--detach", "exe", "sh", "-c", attack]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = b.husk_with(&bin, &["start", "exe"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Init has exec'd sleep: no process runs the copy now (no ETXTBSY).
    let rootfs = b.path().join("rootfs");
    assert!(common::wait_until(std::time::Duration::from_secs(20), || {
        std::fs::read_to_string(format!("/proc/{}/comm", b.state("exe")["pid"])).is_ok_and(|c| c.trim() == "sleep")
    }));
    std::fs::write(rootfs.join("go"), "").unwrap();
    assert!(common::wait_until(std::time::Duration::from_secs(20), || rootfs.join("result").exists()));
    let result = std::fs::read_to_string(rootfs.join("result")).unwrap();
    let after = std::fs::read(&bin).unwrap();
    assert!(after == before, "the host's husk binary was written from the container (attacker: {result:?})");
    assert_ne!(result.trim(), "wrote");
    // `exec` (whose fork joins the container) runs from the sealed copy
    // too: its /proc/<pid>/exe is not the host file, and cannot be opened
    // for writing (the overlay's EROFS; a sealed memfd's EPERM on write).
    let exec = Killed(
        Command::new(&bin)
            .args(["oci", "--root", b.root().to_str().unwrap(), "exec", "exe", "sleep", "1000"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let exe = format!("/proc/{}/exe", exec.0.id());
    let sealed =
        common::wait_until(std::time::Duration::from_secs(20), || std::fs::read_link(&exe).is_ok_and(|t| t != bin));
    assert!(sealed, "husk exec runs the host's file: {exe} -> {:?}", std::fs::read_link(&exe));
    let write = std::fs::OpenOptions::new().append(true).open(&exe).and_then(|mut f| {
        use std::io::Write;
        f.write_all(b"EVIL")
    });
    assert!(write.is_err(), "husk exec's own binary was writable through {exe}");
}

/// `delete --force` of a test's container, even when the test fails.
struct Deleted<'a>(&'a Bundle, &'a str);

impl Drop for Deleted<'_> {
    fn drop(&mut self) {
        let _ = self.0.husk(&["delete", "--force", self.1]);
    }
}

/// A child killed and reaped, even when the test fails.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cap_name(n: u32) -> Option<&'static str> {
    const NAMES: [&str; 41] = [
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_DAC_READ_SEARCH",
        "CAP_FOWNER",
        "CAP_FSETID",
        "CAP_KILL",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETPCAP",
        "CAP_LINUX_IMMUTABLE",
        "CAP_NET_BIND_SERVICE",
        "CAP_NET_BROADCAST",
        "CAP_NET_ADMIN",
        "CAP_NET_RAW",
        "CAP_IPC_LOCK",
        "CAP_IPC_OWNER",
        "CAP_SYS_MODULE",
        "CAP_SYS_RAWIO",
        "CAP_SYS_CHROOT",
        "CAP_SYS_PTRACE",
        "CAP_SYS_PACCT",
        "CAP_SYS_ADMIN",
        "CAP_SYS_BOOT",
        "CAP_SYS_NICE",
        "CAP_SYS_RESOURCE",
        "CAP_SYS_TIME",
        "CAP_SYS_TTY_CONFIG",
        "CAP_MKNOD",
        "CAP_LEASE",
        "CAP_AUDIT_WRITE",
        "CAP_AUDIT_CONTROL",
        "CAP_SETFCAP",
        "CAP_MAC_OVERRIDE",
        "CAP_MAC_ADMIN",
        "CAP_SYSLOG",
        "CAP_WAKE_ALARM",
        "CAP_BLOCK_SUSPEND",
        "CAP_AUDIT_READ",
        "CAP_PERFMON",
        "CAP_BPF",
        "CAP_CHECKPOINT_RESTORE",
    ];
    NAMES.get(n as usize).copied()
}

/// Everything that can fail fails at create, with the reason on stderr and
/// in --log (it used to be an exit code 127/126/1 after start with the
/// reason only in the log): a missing executable, one that is not
/// executable, a capability the runtime's own bounding set lacks.
#[test]
fn create_fails_with_the_reason_for_what_would_fail_at_start() {
    require_root!();
    let b = Bundle::new("ocicore-fail", "true");
    std::fs::write(b.path().join("rootfs/notexec"), "#!/bin/sh\n").unwrap();
    let bundle = b.path().to_str().unwrap().to_string();
    for (args, want) in [(json!(["/nonexistent"]), "/nonexistent"), (json!(["/notexec"]), "/notexec")] {
        b.edit(|c| c["process"]["args"] = args.clone());
        let out = b.husk(&["create", "--bundle", &bundle, "fail"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "create of {args} succeeded");
        assert!(err.contains(want), "create of {args}: stderr names the executable: {err}");
        let log = std::fs::read_to_string(b.path().join("log.json")).unwrap_or_default();
        assert!(log.lines().last().is_some_and(|l| l.contains(want)), "--log has the reason: {log}");
        assert!(!b.root().join("fail").exists(), "a failed create leaves no state");
    }
    // husk itself without CAP_SYS_TIME in its bounding set (a host or an
    // outer container that lacks it) cannot give it to the container.
    b.edit(|c| {
        c["process"]["args"] = json!(["true"]);
        c["process"]["capabilities"] =
            json!({"bounding": ["CAP_SYS_TIME"], "effective": ["CAP_SYS_TIME"], "permitted": ["CAP_SYS_TIME"]});
    });
    let out = Command::new("setpriv")
        .args(["--bounding-set", "-sys_time", "--"])
        .arg(husk_bin())
        .args(["--root", b.root().to_str().unwrap(), "create", "--bundle", &bundle, "nocap"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "create with a capability husk lacks succeeded");
    assert!(err.contains("caps") || err.contains("EPERM"), "the reason is on stderr: {err}");
    assert!(!b.root().join("nocap").exists());
}

/// issue 31 #14: a cpuset level that exists but is still empty (another
/// creator made it and has not filled cpuset.cpus/mems yet) made the
/// attach fail with ENOSPC; every empty level is filled from its parent.
#[test]
fn cgroup_under_an_empty_cpuset_parent_is_filled_not_enospc() {
    require_root!();
    let mount = Path::new("/sys/fs/cgroup/cpuset");
    if !mount.join("cpuset.cpus").exists() {
        // Pure cgroup v2: a child's effective cpuset is its parent's.
        skip("no cgroup v1 cpuset hierarchy");
        return;
    }
    let parent_name = format!("husk-ocicore-cpuset-{}", std::process::id());
    let parent = mount.join(&parent_name);
    std::fs::create_dir(&parent).unwrap();
    assert_eq!(std::fs::read_to_string(parent.join("cpuset.cpus")).unwrap().trim(), "", "a new v1 cpuset is empty");
    let b = Bundle::new("ocicore-cpuset", "exit 3");
    b.edit(|c| c["linux"]["cgroupsPath"] = json!(format!("/{parent_name}/c")));
    let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), "cpuset"]);
    let _ = std::fs::remove_dir(parent.join("c"));
    let _ = std::fs::remove_dir(&parent);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
}

/// CVE-2025-31133's shape: an image whose /dev/null is a symlink (here to
/// /proc/sys/kernel/domainname) in a config that does not mount a fresh
/// /dev: masking /proc/kcore with "/dev/null" bound that file over it
/// instead of the null device. create refuses, naming /dev/null.
#[test]
fn oci_dev_null_swapped_for_symlink_is_refused() {
    require_root!();
    let b = Bundle::new("ocicore-devnull", "test -c /proc/kcore || exit 9");
    let dev = b.path().join("rootfs/dev");
    let _ = std::fs::remove_dir_all(&dev);
    std::fs::create_dir_all(&dev).unwrap();
    std::os::unix::fs::symlink("/proc/sys/kernel/domainname", dev.join("null")).unwrap();
    b.edit(|c| {
        let mounts = c["mounts"].as_array_mut().unwrap();
        mounts.retain(|m| !m["destination"].as_str().unwrap().starts_with("/dev"));
    });
    let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), "devnull"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("/dev/null"), "rc {:?}, stderr {err}", out.status.code());
}

/// A sysctl is written to procfs: with a host directory bound over
/// /proc/sys the write went into that directory's file, create succeeded
/// and the sysctl was silently not set (CVE-2025-52881's redirected
/// writes). It is set (seen through a second proc mount), and the bound
/// file is untouched.
#[test]
fn sysctl_under_a_bound_host_dir_is_set_in_procfs() {
    require_root!();
    let b = Bundle::new("ocicore-sysctl", "test \"$(cat /proc2/sys/kernel/domainname)\" = redirected || exit 9");
    let fake = b.path().join("fakesys");
    std::fs::create_dir_all(fake.join("kernel")).unwrap();
    std::fs::write(fake.join("kernel/domainname"), "untouched").unwrap();
    b.edit(|c| {
        let mounts = c["mounts"].as_array_mut().unwrap();
        mounts.push(json!({"destination": "/proc/sys", "type": "bind", "source": fake, "options": ["rbind"]}));
        mounts.push(json!({"destination": "/proc2", "type": "proc", "source": "proc"}));
        c["linux"]["sysctl"] = json!({"kernel.domainname": "redirected"});
        c["linux"]["readonlyPaths"] = json!([]);
    });
    let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), "sysctl"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(std::fs::read_to_string(fake.join("kernel/domainname")).unwrap(), "untouched", "stderr: {err}");
    assert_eq!(out.status.code(), Some(0), "the sysctl was not set: {err}");
}

/// CVE-2025-52881's shape: another procfs file bound over the sysctl's
/// (here the container's own hostname file over kernel.domainname) took
/// the write, and the container's hostname became the domainname's value.
/// The sysctl goes through a procfs of init's own where nothing is
/// mounted over anything.
#[test]
fn sysctl_write_through_a_bound_procfs_file_reaches_the_named_sysctl() {
    require_root!();
    let b = Bundle::new("ocicore-sysctl-bind", "test \"$(hostname)\" = ocicore || exit 9");
    b.edit(|c| {
        c["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/proc/sys/kernel/domainname", "type": "bind",
            "source": "/proc/sys/kernel/hostname", "options": ["bind"]
        }));
        c["linux"]["sysctl"] = json!({"kernel.domainname": "redirected"});
    });
    let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), "sysctlbind"]);
    assert_eq!(out.status.code(), Some(0), "the hostname changed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Mount points at or below `dir` in this (the host's) mount namespace.
fn host_mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m == &prefix || m.starts_with(&format!("{prefix}/")))
        .collect()
}

/// Lazily unmounts what a test left (or husk leaked) below `dir`, deepest
/// first, so the temp dir's removal never walks into a proc or sys mount.
fn unmount_under(dir: &Path) {
    let mut ms = host_mounts_under(dir);
    ms.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in ms {
        let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Unmounts below its dir when dropped (declared after the TempDir, so it
/// runs first, also when an assertion failed).
struct UnmountOnDrop(PathBuf);

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        unmount_under(&self.0);
    }
}

/// Kubernetes' Bidirectional volumes: rootfsPropagation rshared. pivot_root
/// failed with EINVAL, and every mount made for the container (the rootfs
/// bind, proc, /dev, sys) appeared in the host's namespace and stayed
/// there. Now a create that fails after mounting and one that runs leave no
/// mount under the bundle on the host, and a mount the container makes
/// under an rshared volume does reach the host (the promise of rshared).
#[test]
fn rshared_root_propagation_works_and_leaks_nothing() {
    require_root!();
    let vol = TempDir::new("ocicore-rshared-vol");
    let _unmount_vol = UnmountOnDrop(vol.path().to_path_buf());
    let v = vol.path().to_str().unwrap().to_string();
    // The volume's source is a shared mount of its own on the host, as
    // kubelet's pod volume directories are.
    assert!(Command::new("mount").args(["--bind", &v, &v]).status().unwrap().success());
    assert!(Command::new("mount").args(["--make-shared", &v]).status().unwrap().success());
    std::fs::create_dir(vol.path().join("inner")).unwrap();
    let b = Bundle::new("ocicore-rshared", "mount -t tmpfs fromcontainer /vol/inner || exit 9; exit 0");
    b.edit(|c| {
        c["linux"]["rootfsPropagation"] = json!("rshared");
        for k in ["bounding", "effective", "permitted"] {
            c["process"]["capabilities"][k] = json!(["CAP_SYS_ADMIN"]);
        }
        c["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/vol", "type": "bind", "source": v, "options": ["rbind", "rshared"]
        }));
    });
    let _unmount_bundle = UnmountOnDrop(b.path().to_path_buf());
    let bundle = b.path().to_str().unwrap().to_string();
    // The rootfs a shared mount of its own, as containerd's overlay under
    // systemd's rshared / is.
    let rootfs = b.path().join("rootfs");
    let r = rootfs.to_str().unwrap();
    assert!(Command::new("mount").args(["--bind", r, r]).status().unwrap().success());
    assert!(Command::new("mount").args(["--make-shared", r]).status().unwrap().success());
    let ours = vec![r.to_string()];

    // A create that fails after proc, /dev and sys are mounted.
    b.edit(|c| {
        c["mounts"].as_array_mut().unwrap().push(json!({"destination": "/bad", "type": "nosuchfs", "source": "x"}));
    });
    let out = b.husk(&["create", "--bundle", &bundle, "rsharedbad"]);
    let leaked = host_mounts_under(b.path());
    assert!(!out.status.success(), "a mount of type nosuchfs fails");
    assert_eq!(leaked, ours, "a failed create left the container's mounts on the host");
    let _ = b.husk(&["delete", "--force", "rsharedbad"]);

    b.edit(|c| {
        c["mounts"].as_array_mut().unwrap().pop();
    });
    let out = b.husk(&["run", "--bundle", &bundle, "rshared"]);
    let leaked = host_mounts_under(b.path());
    let reached = host_mounts_under(&vol.path().join("inner"));
    assert_eq!(out.status.code(), Some(0), "rshared container runs: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(leaked, ours, "a container that ran left its mounts on the host");
    assert_eq!(reached.len(), 1, "the container's mount under the rshared volume reached the host: {reached:?}");
}

/// containerd's CRI sends the spec's device rules with every
/// UpdateContainerResources; husk refused the whole update ("device rules
/// cannot change"), so `crictl update` and in-place resize failed. As with
/// runc 1.1, the rules are left as create set them and the rest applies.
#[test]
fn update_with_device_rules_applies_resources() {
    require_root!();
    let b = Bundle::new("ocicore-upd", "exec sleep 1000");
    b.ok(&["create", "--bundle", b.path().to_str().unwrap(), "upd"]);
    let res = b.path().join("resources.json");
    std::fs::write(
        &res,
        json!({
            "devices": [{"allow": false, "access": "rwm"}, {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"}],
            "pids": {"limit": 32},
            "cpu": {"shares": 256}
        })
        .to_string(),
    )
    .unwrap();
    let out = b.husk(&["update", "--resources", res.to_str().unwrap(), "upd"]);
    let cg = PathBuf::from(format!("/sys/fs/cgroup/pids/husk-ocicore/ocicore-upd-{}", std::process::id()));
    let pids_max = std::fs::read_to_string(cg.join("pids.max")).unwrap_or_default();
    b.ok(&["delete", "--force", "upd"]);
    assert!(out.status.success(), "update with the CRI's device rules: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(pids_max.trim(), "32", "the update's pids limit applied");
}

/// containerd 1.6 sends systemd's `slice:prefix:name` cgroupsPath when the
/// CRI client asks for a systemd parent, even to a cgroupfs runtime; husk
/// refused it. runc's cgroupfs driver takes it as one directory of that
/// name: the limits land there, init is in it, delete removes it.
#[test]
fn slice_form_cgroups_path_under_cgroupfs() {
    require_root!();
    let b = Bundle::new("ocicore-slice", "exec sleep 1000");
    let name = format!("husk-ocicore.slice:cri:{}", std::process::id());
    b.edit(|c| c["linux"]["cgroupsPath"] = json!(name));
    let out = b.husk(&["create", "--bundle", b.path().to_str().unwrap(), "slice"]);
    assert!(out.status.success(), "slice form refused: {}", String::from_utf8_lossy(&out.stderr));
    let cg = PathBuf::from("/sys/fs/cgroup/pids").join(&name);
    let pids_max = std::fs::read_to_string(cg.join("pids.max")).unwrap_or_default();
    let procs = std::fs::read_to_string(cg.join("cgroup.procs")).unwrap_or_default();
    let pid = b.state("slice")["pid"].as_i64().unwrap();
    b.ok(&["delete", "--force", "slice"]);
    assert_eq!(pids_max.trim(), "64", "resources applied at {}", cg.display());
    assert!(procs.lines().any(|l| l == pid.to_string()), "init {pid} in {}: {procs:?}", cg.display());
    assert!(!cg.exists(), "delete removes the cgroup");
}

/// runc 1.1 applies every recursive mount option (rnosuid, rnodev,
/// rnoexec, rnoatime, rnosymfollow, ...) with mount_setattr(AT_RECURSIVE);
/// husk refused all but `rro`. They now reach the mounts under an rbind
/// volume too, which a plain `nosuid` on the bind would not.
#[test]
fn recursive_mount_options() {
    require_root!();
    let vol = TempDir::new("ocicore-recopts-vol");
    let _unmount_vol = UnmountOnDrop(vol.path().to_path_buf());
    let sub = vol.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    assert!(Command::new("mount").args(["-t", "tmpfs", "recopts", sub.to_str().unwrap()]).status().unwrap().success());
    let b = Bundle::new(
        "ocicore-recopts",
        "line=$(grep ' /vol/sub ' /proc/self/mountinfo); \
         for o in nosuid nodev noexec noatime nosymfollow; do \
           echo \"$line\" | cut -d' ' -f6 | tr , '\\n' | grep -qx $o || { echo \"no $o: $line\" >&2; exit 9; }; \
         done",
    );
    b.edit(|c| {
        c["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/vol", "type": "bind", "source": vol.path(),
            "options": ["rbind", "rnosuid", "rnodev", "rnoexec", "rnoatime", "rnosymfollow"]
        }));
    });
    let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), "recopts"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `exec --env K=V` appended a second K after the spec's, so the process
/// saw both (which one a program reads is its own choice). As with runc,
/// the command line's value replaces the spec's.
#[test]
fn exec_env_overrides_spec() {
    require_root!();
    let b = Bundle::new("ocicore-execenv", "exec sleep 1000");
    b.edit(|c| c["process"]["env"].as_array_mut().unwrap().push(json!("FOO=spec")));
    b.ok(&["create", "--bundle", b.path().to_str().unwrap(), "execenv"]);
    b.ok(&["start", "execenv"]);
    // env itself, not a shell (busybox sh keeps one value per name).
    let out = b.husk(&["exec", "--env", "FOO=cli", "execenv", "env"]);
    b.ok(&["delete", "--force", "execenv"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let foo: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FOO=")).collect();
    assert_eq!(foo, ["FOO=cli"], "one FOO, the command line's");
}

/// Configs runc 1.1 runs that husk refused: a seccomp `listenerPath` with
/// no SCMP_ACT_NOTIFY rule (runc connects to it only for one; a harness
/// waiting there hung on the refusal), a capability name husk does not
/// know (runc drops it with a warning), relative maskedPaths and
/// readonlyPaths (runc resolves them from the container's /). They run,
/// and the masks and read-only paths still hold.
#[test]
fn configs_runc_accepts_run_with_masks_intact() {
    require_root!();
    let b = Bundle::new(
        "ocicore-accepts",
        "test -s /proc/kcore && exit 13; echo x > /proc/sys/kernel/domainname 2>/dev/null && exit 12; exit 0",
    );
    b.edit(|c| {
        c["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/run/husk-no-agent.sock"});
        for k in ["bounding", "effective", "permitted"] {
            c["process"]["capabilities"][k] = json!(["CAP_KILL", "CAP_FROM_A_NEWER_KERNEL"]);
        }
        c["linux"]["maskedPaths"] = json!(["proc/kcore"]);
        c["linux"]["readonlyPaths"] = json!(["proc/sys"]);
    });
    let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), "accepts"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let log = std::fs::read_to_string(b.path().join("log.json")).unwrap_or_default();
    assert!(log.contains("CAP_FROM_A_NEWER_KERNEL"), "the dropped capability is named in the log: {log}");
}

/// runc runs startContainer hooks in init after it set the process's
/// environment, so a hook without an env of its own sees the process's;
/// husk's saw an empty one.
#[test]
fn start_container_hooks_inherit_the_process_env() {
    require_root!();
    let b = Bundle::new("ocicore-hookenv", "cat /hookenv");
    b.edit(|c| {
        c["process"]["env"].as_array_mut().unwrap().push(json!("FOO=fromprocess"));
        c["hooks"] = json!({"startContainer": [{"path": "/bin/sh", "args": ["sh", "-c", "echo \"$FOO\" > /hookenv"]}]});
    });
    let out = b.husk(&["run", "--bundle", b.path().to_str().unwrap(), "hookenv"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "fromprocess\n", "the hook saw the process's FOO");
}
