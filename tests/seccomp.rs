//! Seccomp on the real kernel: what the shipped profiles deny (and with
//! which errno), that ordinary toolchains still work under `default`, user
//! profiles in Docker's format, the foreign-ABI kill, and explain mode.
//!
//! Syscalls are made from inside the sandbox by the host's python3 (host
//! mode) through ctypes' `syscall(2)`, so each one is exactly the call named.
mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;

fn nr(name: &str) -> u64 {
    husk::seccomp::syscalls::X86_64.iter().find(|(_, n)| *n == name).unwrap_or_else(|| panic!("no syscall {name}")).0
        as u64
}

/// Makes each (label, syscall, args) call and prints {label: errno name or
/// "ok"} as JSON. A clone that the filter let through returns 0 in the
/// child, which leaves at once.
const PROBE: &str = r#"
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
for label, nr, args in json.loads(sys.argv[1]):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a) for a in args])
    if r == 0 and label.startswith("clone"):
        os._exit(0)
    out[label] = "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
print(json.dumps(out))
"#;

type Call = (String, u64, Vec<u64>);

fn call(label: &str, name: &str, args: &[u64]) -> Call {
    (label.to_string(), nr(name), args.to_vec())
}

/// Runs the probe under `extra` flags; returns its results and the verdict.
fn probe(extra: &[&str], calls: &[Call]) -> (BTreeMap<String, String>, Value) {
    let arg = serde_json::to_string(calls).unwrap();
    let (v, code) = run_json(extra, &["python3", "-c", PROBE, &arg]);
    assert_eq!(code, 0, "probe failed: {v}");
    let results = serde_json::from_str(stdout_of(&v).trim()).unwrap_or_else(|e| panic!("probe output ({e}): {v}"));
    (results, v)
}

const SIGCHLD: u64 = 17;
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541c;
const CLONE_NEW: &[(&str, u64)] = &[
    ("NEWNS", 0x0002_0000),
    ("NEWCGROUP", 0x0200_0000),
    ("NEWUTS", 0x0400_0000),
    ("NEWIPC", 0x0800_0000),
    ("NEWUSER", 0x1000_0000),
    ("NEWPID", 0x2000_0000),
    ("NEWNET", 0x4000_0000),
];

/// The syscalls both shipped profiles deny, with the errno each must get.
fn dangerous_calls() -> Vec<(Call, &'static str)> {
    let eperm = husk::seccomp::DENIED_EPERM;
    let mut calls: Vec<(Call, &str)> = eperm.iter().map(|n| (call(n, n, &[]), "EPERM")).collect();
    // setns on an invalid fd would be EBADF, unshare(0) would succeed: only
    // the filter says EPERM.
    calls.push((call("setns(-1)", "setns", &[u64::MAX, 0]), "EPERM"));
    for (flag, bit) in CLONE_NEW {
        calls.push((call(&format!("clone(CLONE_{flag})"), "clone", &[bit | SIGCHLD]), "EPERM"));
    }
    calls.push((call("clone3", "clone3", &[0, 0]), "ENOSYS"));
    calls.push((call("ioctl(TIOCSTI)", "ioctl", &[0, TIOCSTI, 0]), "EPERM"));
    calls.push((call("ioctl(TIOCSTI|1<<32)", "ioctl", &[0, TIOCSTI | 1 << 32, 0]), "EPERM"));
    calls.push((call("ioctl(TIOCLINUX)", "ioctl", &[0, TIOCLINUX, 0]), "EPERM"));
    calls
}

fn assert_errnos(profile: &str, results: &BTreeMap<String, String>, expected: &[(Call, &str)]) {
    let wrong: Vec<String> = expected
        .iter()
        .filter(|((label, ..), want)| results.get(label).map(String::as_str) != Some(want))
        .map(|((label, ..), want)| format!("{label}: got {:?}, want {want}", results.get(label)))
        .collect();
    assert!(wrong.is_empty(), "--seccomp {profile}:\n  {}", wrong.join("\n  "));
}

#[test]
fn dangerous_syscalls_fail_with_their_errno_under_both_shipped_profiles() {
    let expected = dangerous_calls();
    let calls: Vec<Call> = expected.iter().map(|(c, _)| c.clone()).collect();
    for profile in ["default", "strict"] {
        let (results, v) = probe(&["--seccomp", profile], &calls);
        assert_errnos(profile, &results, &expected);
        assert_eq!(v["seccomp"]["profile"], profile);
        assert_eq!(v["seccomp"]["mode"], "enforce");
    }
}

/// Many of these calls would fail with EPERM anyway for lack of
/// capabilities; explain mode proves the filter is what refused each one.
#[test]
fn explain_mode_shows_the_filter_denied_each_dangerous_syscall() {
    let expected = dangerous_calls();
    let calls: Vec<Call> = expected.iter().map(|(c, _)| c.clone()).collect();
    for profile in ["default", "strict"] {
        let (results, v) = probe(&["--seccomp", profile, "--seccomp-report"], &calls);
        assert_errnos(profile, &results, &expected);
        let denied = &v["seccomp"]["denied"];
        for ((_, nr, _), _) in &expected {
            let name = husk::seccomp::syscall_name(*nr as i64);
            assert!(denied[&name].as_u64().unwrap_or(0) >= 1, "{profile}: {name} not in denied: {denied}");
        }
        assert_eq!(denied["clone"], CLONE_NEW.len() as u64, "{profile}: {denied}");
        assert_eq!(denied["ioctl"], 3, "{profile}: {denied}");
        assert_eq!(v["seccomp"]["denied_errno"]["clone3"], "ENOSYS");
        assert_eq!(v["seccomp"]["denied_errno"]["mount"], "EPERM");
    }
}

#[test]
fn strict_denies_ptrace_foreign_socket_families_and_personality_changes() {
    let calls = vec![
        call("ptrace", "ptrace", &[3, 999_999, 0, 0]),
        call("process_vm_readv", "process_vm_readv", &[999_999, 0, 0, 0, 0, 0]),
        call("process_vm_writev", "process_vm_writev", &[999_999, 0, 0, 0, 0, 0]),
        call("socket(AF_NETLINK)", "socket", &[16, 3, 0]),
        call("socket(AF_PACKET)", "socket", &[17, 3, 0]),
        call("socket(AF_UNIX)", "socket", &[1, 1, 0]),
        call("socket(AF_INET)", "socket", &[2, 1, 0]),
        call("socket(AF_INET6)", "socket", &[10, 2, 0]),
        call("personality(PER_LINUX32)", "personality", &[8]),
        call("personality(query)", "personality", &[0xffff_ffff]),
    ];
    let (strict, _) = probe(&["--seccomp", "strict", "--seccomp-report"], &calls);
    let want = [
        ("ptrace", "EPERM"),
        ("process_vm_readv", "EPERM"),
        ("process_vm_writev", "EPERM"),
        ("socket(AF_NETLINK)", "EAFNOSUPPORT"),
        ("socket(AF_PACKET)", "EAFNOSUPPORT"),
        ("socket(AF_UNIX)", "ok"),
        ("socket(AF_INET)", "ok"),
        ("socket(AF_INET6)", "ok"),
        ("personality(PER_LINUX32)", "EPERM"),
        ("personality(query)", "ok"),
    ];
    for (label, errno) in want {
        assert_eq!(strict[label], errno, "strict: {label}");
    }
    // The same calls pass the default profile's filter (whatever the kernel
    // then says about a missing pid).
    let (default, v) = probe(&["--seccomp", "default", "--seccomp-report"], &calls);
    assert_eq!(default["socket(AF_NETLINK)"], "ok");
    assert_eq!(default["personality(PER_LINUX32)"], "ok");
    assert_eq!(v["seccomp"]["denied"], serde_json::json!({}), "default denies none of these");
}

/// personality(ADDR_NO_RANDOMIZE | READ_IMPLIES_EXEC | MMAP_PAGE_ZERO) turns
/// off the process's own ASLR or NX for what it execs next: both shipped
/// profiles refuse every value outside Docker's short list.
#[test]
fn personality_cannot_weaken_aslr_or_nx() {
    let calls = vec![
        call("ADDR_NO_RANDOMIZE", "personality", &[0x0040000]),
        call("READ_IMPLIES_EXEC", "personality", &[0x0400000]),
        call("MMAP_PAGE_ZERO", "personality", &[0x0100000]),
        call("PER_LINUX", "personality", &[0]),
        call("query", "personality", &[0xffff_ffff]),
    ];
    for profile in ["default", "strict"] {
        let (got, _) = probe(&["--seccomp", profile], &calls);
        for label in ["ADDR_NO_RANDOMIZE", "READ_IMPLIES_EXEC", "MMAP_PAGE_ZERO"] {
            assert_eq!(got[label], "EPERM", "{profile}: personality({label})");
        }
        assert_eq!(got["PER_LINUX"], "ok", "{profile}");
        assert_eq!(got["query"], "ok", "{profile}");
    }
}

/// i386 `int 0x80` and the x32 table reach syscalls by other numbers than
/// the rules name: the filter kills the process.
#[test]
fn foreign_abi_syscalls_kill_the_process() {
    let x32 = format!(
        "import ctypes; libc = ctypes.CDLL(None); libc.syscall(ctypes.c_long({})); print('survived')",
        0x4000_0000 | nr("getpid")
    );
    // mov eax, 20 (i386 getpid); int 0x80; ret
    let i386 = "import ctypes, mmap; m = mmap.mmap(-1, 4096, prot=7); m.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])); \
                f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m))); f(); print('survived')";
    for (abi, script) in [("x32", x32.as_str()), ("i386", i386)] {
        let (v, code) = run_json(&["--seccomp", "default"], &["python3", "-c", script]);
        assert_eq!(v["termination"], "signaled", "{abi}: {v}");
        assert_eq!(v["signal_name"], "SIGSYS", "{abi}");
        assert_eq!(code, 128 + 31);
        assert!(v["seccomp"]["killed_by_filter"].is_string(), "{abi}: the verdict explains the SIGSYS");
        // Control: without a filter this kernel answers (ENOSYS for x32,
        // a pid for i386) and the process lives.
        let (v, code) = run_json(&["--seccomp", "unconfined"], &["python3", "-c", script]);
        assert_eq!((code, stdout_of(&v).trim()), (0, "survived"), "{abi} unconfined: {v}");
    }
}

const PYTHON_WORKLOAD: &str = r#"
import json, multiprocessing, os, socket, subprocess, sys, threading
def square(x):
    return x * x
if __name__ == "__main__":
    out = {}
    got = []
    threads = [threading.Thread(target=lambda i=i: got.append(square(i))) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    out["threads"] = sorted(got) == [i * i for i in range(8)]
    out["subprocess"] = subprocess.run(["sh", "-c", "echo sub"], capture_output=True, text=True).stdout.strip()
    a, b = socket.socketpair(socket.AF_UNIX)
    a.sendall(b"ping")
    out["socketpair"] = b.recv(4).decode()
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    cli = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    cli.sendall(b"tcp")
    out["tcp"] = conn.recv(3).decode()
    with open("/workspace/f.txt", "w") as f:
        f.write("data")
    out["file"] = open("/workspace/f.txt").read()
    with multiprocessing.Pool(2) as pool:
        out["multiprocessing"] = pool.map(square, [1, 2, 3])
    venv = subprocess.run([sys.executable, "-m", "venv", "/workspace/v"], capture_output=True, text=True)
    out["venv"] = [venv.returncode, venv.stderr[-500:]]
    pip = subprocess.run(["/workspace/v/bin/python", "-m", "pip", "--version"], capture_output=True, text=True)
    out["pip"] = pip.stdout.split(" ")[0]
    print(json.dumps(out))
"#;

#[test]
fn python_threads_subprocess_sockets_files_and_venv_work_under_default() {
    let (v, code) = run_json(&["--seccomp", "default", "--seccomp-report"], &["python3", "-c", PYTHON_WORKLOAD]);
    assert_eq!(code, 0, "{v}");
    let out: Value = serde_json::from_str(stdout_of(&v).trim()).unwrap_or_else(|e| panic!("{e}: {v}"));
    assert_eq!(out["threads"], true);
    assert_eq!(out["subprocess"], "sub");
    assert_eq!(out["socketpair"], "ping");
    assert_eq!(out["tcp"], "tcp");
    assert_eq!(out["file"], "data");
    assert_eq!(out["multiprocessing"], serde_json::json!([1, 4, 9]));
    assert_eq!(out["venv"][0], 0, "python3 -m venv: {}", out["venv"][1]);
    assert_eq!(out["pip"], "pip");
    // The only denial is clone3, for which glibc falls back to clone.
    let denied = v["seccomp"]["denied"].as_object().unwrap();
    assert!(denied.keys().all(|k| k == "clone3"), "unexpected denials: {denied:?}");
}

#[test]
fn gcc_make_git_node_and_coreutils_work_under_default() {
    let script = r#"set -e
cd /workspace
printf '#include <pthread.h>\n#include <stdio.h>\nvoid *f(void *a) { return a; }\nint main(void) { pthread_t t; pthread_create(&t, 0, f, 0); pthread_join(t, 0); puts("c ok"); return 0; }\n' > m.c
printf 'm: m.c\n\tgcc -O1 -pthread -o m m.c\n' > Makefile
make -s && ./m
git init -q r && cd r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m init && git log --format=%s && cd ..
node -e 'const cp = require("child_process"); console.log("node", cp.execSync("echo sub").toString().trim())'
tar czf t.tgz m.c && sha256sum t.tgz >/dev/null && sort -r Makefile | head -1 | cut -c1-2 && echo coreutils ok"#;
    let (v, code) = run_json(&["--seccomp", "default", "--seccomp-report"], &["sh", "-c", script]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(stdout_of(&v), "c ok\ninit\nnode sub\nm:\ncoreutils ok\n", "{v}");
    let denied = v["seccomp"]["denied"].as_object().unwrap();
    assert!(denied.keys().all(|k| k == "clone3"), "unexpected denials: {denied:?}");
}

#[test]
fn explain_mode_names_the_blocked_mount_and_keyctl() {
    let calls = vec![call("mount", "mount", &[0, 0, 0, 0, 0]), call("keyctl", "keyctl", &[0, 0, 0, 0, 0])];
    let (results, v) = probe(&["--seccomp-report"], &calls);
    assert_eq!((results["mount"].as_str(), results["keyctl"].as_str()), ("EPERM", "EPERM"));
    assert_eq!(v["seccomp"]["mode"], "report");
    assert_eq!(v["seccomp"]["denied"], serde_json::json!({"mount": 1, "keyctl": 1}));
    assert_eq!(v["seccomp"]["denied_total"], 2);
}

fn data(name: &str) -> String {
    format!("{}/tests/data/seccomp/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn docker_format_profile_file_is_loaded_cached_and_enforced() {
    let dir = TempDir::new("seccomp-docker");
    let store = dir.path().to_string_lossy().into_owned();
    let profile = data("docker-style.json");
    let script = "mkdir /tmp/x; uname -s; python3 -c 'import ctypes, os; l = ctypes.CDLL(None, use_errno=True); \
                  print(l.personality(8), os.strerror(ctypes.get_errno()))'";
    let run = || {
        let mut args = vec!["--root", store.as_str(), "run", "--json", "--seccomp", profile.as_str()];
        args.extend(["--", "sh", "-c", script]);
        let out = husk(&args).output().unwrap();
        verdict_of(&out)
    };
    let v = run();
    assert!(stderr_of(&v).contains("Disk quota exceeded"), "mkdir must get the profile's EDQUOT: {v}");
    assert_eq!(stdout_of(&v), "Linux\n-1 Invalid argument\n", "arm-only entry skipped; personality arg rule: {v}");
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(&profile).unwrap()))
    };
    assert_eq!(v["seccomp"]["sha256"], sha);
    assert_eq!(v["seccomp"]["source"], "file");
    assert_eq!(
        v["seccomp"]["ignored_arches"],
        serde_json::json!(["SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"])
    );
    assert_eq!(v["seccomp"]["cache"], "miss");
    assert_eq!(run()["seccomp"]["cache"], "hit", "compiled once, then loaded from the store");
}

/// A compiled filter is installed as read: one from a store root someone
/// else owns (who could plant an allow-all program there) is never used.
#[test]
fn cached_filter_from_a_foreign_store_root_is_never_loaded() {
    require_root!();
    let dir = TempDir::new("seccomp-foreign");
    nix::unistd::chown(dir.path(), Some(65534.into()), Some(65534.into())).unwrap();
    let store = dir.path().to_string_lossy().into_owned();
    let profile = data("docker-style.json");
    for _ in 0..2 {
        let out = husk(&["--root", &store, "run", "--json", "--seccomp", &profile, "--", "true"]).output().unwrap();
        let v = verdict_of(&out);
        assert_eq!(v["termination"], "exited", "{v}");
        assert_eq!(v["seccomp"]["cache"], "uncached", "a foreign store root must not supply filters: {v}");
    }
    assert!(!dir.join("seccomp").exists(), "husk wrote into a store root it does not own");
}

#[test]
fn podmans_own_profile_loads_and_is_enforced() {
    let path = "/usr/share/containers/seccomp.json";
    if !std::path::Path::new(path).exists() {
        return skip("no /usr/share/containers/seccomp.json (package golang-github-containers-common)");
    }
    let dir = TempDir::new("seccomp-podman");
    let store = dir.path().to_string_lossy().into_owned();
    let calls = vec![call("userfaultfd", "userfaultfd", &[0]), call("sysfs", "sysfs", &[1])];
    let arg = serde_json::to_string(&calls).unwrap();
    let out = husk(&["--root", &store, "run", "--json", "--seccomp", path, "--", "python3", "-c", PROBE, &arg])
        .output()
        .unwrap();
    let v = verdict_of(&out);
    let results: Value = serde_json::from_str(stdout_of(&v).trim()).unwrap_or_else(|e| panic!("{e}: {v}"));
    assert_eq!(results, serde_json::json!({"userfaultfd": "EPERM", "sysfs": "EPERM"}), "its first entry: {v}");
}

#[test]
fn malformed_profile_is_refused_before_the_sandbox_with_the_field_and_value() {
    let (v, code) = run_json(&["--seccomp", &data("malformed.json")], &["true"]);
    assert_eq!(code, 125);
    assert_eq!(v["termination"], "setup_failed");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("syscalls[1].action") && msg.contains("SCMP_ACT_EPERM"), "{msg}");
    assert!(msg.contains("malformed.json"), "{msg}");
}

#[test]
fn unconfined_is_said_loudly_and_the_command_runs_without_a_filter() {
    let (v, code) = run_json(&["--seccomp", "unconfined"], &["grep", "^Seccomp:", "/proc/self/status"]);
    assert_eq!(code, 0);
    assert_eq!(stdout_of(&v), "Seccomp:\t0\n");
    assert_eq!(v["seccomp"]["unconfined"], true);
    assert_eq!(v["isolation"]["seccomp"]["mode"], "unconfined");
    assert!(v["seccomp"]["warning"].as_str().unwrap().contains("no seccomp filter"));
    let (v, _) = run_json(&[], &["grep", "^Seccomp", "/proc/self/status"]);
    assert_eq!(stdout_of(&v), "Seccomp:\t2\nSeccomp_filters:\t1\n", "default: one filter, mode 2");
    assert_eq!(v["isolation"]["seccomp"]["profile"], "default");
    let (v, code) = run_json(&["--seccomp", "unconfined", "--seccomp-report"], &["true"]);
    assert_eq!(code, 125, "nothing to report without a filter: {v}");
}

#[test]
fn seccomp_check_and_show() {
    let out = husk(&["seccomp", "show", "strict"]).output().unwrap();
    let shipped = std::fs::read_to_string(format!("{}/seccomp/strict.json", env!("CARGO_MANIFEST_DIR"))).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), shipped);
    let out = husk(&["seccomp", "check", "--json", &data("docker-style.json")]).output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["syscalls"]["mkdir"], "errno EDQUOT");
    assert_eq!(v["syscalls"]["uname"], "allow");
    assert_eq!(v["syscalls"]["sethostname"], "errno EAGAIN");
    let out = husk(&["seccomp", "check", "--json", "--cap-add", "CAP_SYS_ADMIN", &data("docker-style.json")])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["syscalls"]["sethostname"], "allow", "includes.caps with the capability kept");
    let out = husk(&["seccomp", "check", &data("malformed.json")]).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("syscalls[1].action"));
    let out = husk(&["seccomp", "check", "default"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("clone: allow if arg0 & 0x7e020000 == 0x0"));
}

/// Runs husk under a filter of its own that fails seccomp(2) with EACCES.
const DENY_SECCOMP: &str = r#"
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
insn = lambda code, jt, jf, k: struct.pack("HBBI", code, jt, jf, k)
prog = ctypes.create_string_buffer(insn(0x20, 0, 0, 0) + insn(0x15, 0, 1, 317) + insn(0x06, 0, 0, 0x5000d) + insn(0x06, 0, 0, 0x7fff0000))
class FProg(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
assert libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.prctl(22, 2, ctypes.byref(FProg(4, ctypes.addressof(prog))), 0, 0) == 0
os.execv(sys.argv[1], sys.argv[1:])
"#;

#[test]
fn a_filter_the_kernel_refuses_fails_the_run_instead_of_running_unfiltered() {
    let out = std::process::Command::new("python3")
        .args(["-c", DENY_SECCOMP, husk_bin().to_str().unwrap(), "run", "--json", "--", "echo", "ran"])
        .output()
        .unwrap();
    let v = verdict_of(&out);
    assert_eq!(out.status.code(), Some(125), "{v}");
    assert_eq!(v["termination"], "setup_failed");
    assert_eq!(v["error"]["step"], "install_seccomp");
    assert_eq!(v["error"]["errno"], "EACCES");
    assert_eq!(stdout_of(&v), "", "the command never ran");
    assert!(v["seccomp"].is_null(), "no claim of a filter that was not loaded: {v}");
}

#[test]
fn profile_naming_a_misspelled_syscall_is_warned_about_not_silently_accepted() {
    // `readx` matches nothing: the profile allows less than its author
    // meant. `check` says so on stderr; a run's verdict counts such names.
    let dir = TempDir::new("seccomp-typo");
    let path = dir.path().join("typo.json");
    let profile = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["readx"],"action":"SCMP_ACT_ERRNO"}]}"#;
    std::fs::write(&path, profile).unwrap();
    let path = path.to_str().unwrap();
    let out = husk(&["seccomp", "check", path]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning") && err.contains("readx"), "no warning: {err}");
    let (v, code) = run_json(&["--seccomp", path], &["true"]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["isolation"]["seccomp"]["ignored_name_count"], 1, "{v:#}");
}

/// husk's own code runs under the filter between loading it and execve
/// (execve itself, sendto to report, exit_group when execve fails): a
/// profile denying those is refused when the run is planned, as husk's
/// setup failure naming them, instead of the pre-exec child dying of
/// SIGSEGV and the verdict blaming the command (`signaled`, 139).
#[test]
fn profile_denying_what_husk_calls_before_exec_is_refused_naming_the_syscalls() {
    let dir = TempDir::new("seccomp-husk-needs");
    let deny_all = dir.path().join("deny-all.json");
    std::fs::write(&deny_all, r#"{"defaultAction":"SCMP_ACT_ERRNO"}"#).unwrap();
    let (v, code) = run_json(&["--seccomp", deny_all.to_str().unwrap()], &["echo", "ran"]);
    assert_eq!(code, 125, "{v:#}");
    assert_eq!(v["termination"], "setup_failed", "{v:#}");
    assert_eq!(stdout_of(&v), "", "the command never ran");
    let msg = v["error"]["message"].as_str().unwrap();
    for name in ["execve", "sendto", "exit_group"] {
        assert!(msg.contains(name), "{name} is not named: {msg}");
    }
    assert!(msg.contains("deny-all.json"), "{msg}");

    let deny_exec = dir.path().join("deny-exec.json");
    let profile = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["execve"],"action":"SCMP_ACT_ERRNO"}]}"#;
    std::fs::write(&deny_exec, profile).unwrap();
    let (v, code) = run_json(&["--seccomp", deny_exec.to_str().unwrap()], &["true"]);
    assert_eq!(code, 125, "{v:#}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("allow execve,") && !msg.contains("sendto"), "only what is missing: {msg}");

    let out = husk(&["seccomp", "check", deny_all.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning") && err.contains("execve, sendto, exit_group"), "check warns: {err}");
}
