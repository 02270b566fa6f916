//! The verdict rules as values: each judge says ESCAPED for the result that
//! shows an attempt got through, `contained` only for a denial that means
//! isolation held, and `error` for results that prove nothing.

use super::*;
use serde_json::json;

fn ctx() -> Context {
    Context {
        kernel: SandboxKernel::Host,
        sandbox_root_host_uid: Some(100000),
        marker_token: "husk-selftest-secret-abc".into(),
        host_hostname: "hosty".into(),
        sysv_id: Some(32768),
        victim_marker: Some("husk-selftest-victim-1".into()),
        memory_limit: Some(2 << 30),
        pids_limit: Some(1024),
    }
}

fn exited(report: Value) -> ProbeRun {
    ProbeRun { termination: "exited".into(), exit_code: 0, error: None, report: Some(report), verdict: json!({}) }
}

fn verdict_of(j: Judge, report: Value) -> Verdict {
    judge(j, &ctx(), &exited(report), &After::default()).verdict
}

const SYS: Judge = Judge::Syscall { passed: &["EINVAL"], absent: &["ENOENT"] };

#[test]
fn syscall_success_or_a_passed_errno_is_an_escape() {
    assert_eq!(verdict_of(SYS, json!({"name": "reboot", "ok": true, "ret": 0})), Verdict::Escaped);
    assert_eq!(verdict_of(SYS, json!({"name": "reboot", "ok": false, "errno": "EINVAL"})), Verdict::Escaped);
}

#[test]
fn syscall_denials_and_seccomp_kills_are_contained() {
    for e in ["EPERM", "EACCES", "ENOSYS"] {
        assert_eq!(verdict_of(SYS, json!({"name": "x", "ok": false, "errno": e})), Verdict::Contained, "{e}");
    }
    assert_eq!(verdict_of(SYS, json!({"name": "x", "ok": false, "killed_by_signal": 31})), Verdict::Contained);
}

#[test]
fn syscall_results_that_prove_nothing_are_errors_not_contained() {
    assert_eq!(verdict_of(SYS, json!({"name": "x", "ok": false, "errno": "EBADF"})), Verdict::Error);
    assert_eq!(verdict_of(SYS, json!({"name": "x", "ok": false, "killed_by_signal": 11})), Verdict::Error);
    assert_eq!(verdict_of(SYS, json!({"name": "x", "ok": false})), Verdict::Error);
    assert_eq!(verdict_of(SYS, json!({"name": "x", "ok": false, "errno": "ENOENT"})), Verdict::NotApplicable);
    let i386 = json!({"name": "i386-int80", "ok": false, "killed_by_signal": 11});
    assert_eq!(verdict_of(SYS, i386), Verdict::NotApplicable);
}

#[test]
fn a_sandbox_that_did_not_start_proves_nothing() {
    let run = ProbeRun {
        termination: "setup_failed".into(),
        exit_code: 125,
        error: Some("pivot_root: EINVAL".into()),
        report: None,
        verdict: json!({}),
    };
    for j in [SYS, Judge::Marker, Judge::MemoryBomb, Judge::CpuHog, Judge::Daemon] {
        let f = judge(j, &ctx(), &run, &After::default());
        assert_eq!(f.verdict, Verdict::Error, "{j:?}");
        assert!(f.detail.contains("pivot_root"), "{}", f.detail);
    }
}

#[test]
fn a_missing_report_or_usage_error_proves_nothing() {
    let mut run = exited(json!({}));
    run.report = None;
    assert_eq!(judge(Judge::WriteDenied, &ctx(), &run, &After::default()).verdict, Verdict::Error);
    let usage = json!({"cmd": "write", "ok": false, "usage_error": "write PATH"});
    assert_eq!(verdict_of(Judge::WriteDenied, usage), Verdict::Error);
}

#[test]
fn anything_the_probe_left_on_the_host_is_an_escape() {
    let after = After { created_on_host: vec!["/usr/x".into()], ..After::default() };
    let f = judge(Judge::WriteDenied, &ctx(), &exited(json!({"ok": false, "errno": "EROFS"})), &after);
    assert_eq!(f.verdict, Verdict::Escaped);
    assert!(f.detail.contains("/usr/x"));
}

#[test]
fn writes() {
    let w = |v| verdict_of(Judge::WriteDenied, v);
    assert_eq!(w(json!({"path": "/x", "ok": true, "existing": false})), Verdict::Escaped);
    assert_eq!(w(json!({"path": "/x", "ok": true, "existing": true})), Verdict::Escaped);
    assert_eq!(w(json!({"path": "/x", "ok": false, "errno": "EROFS"})), Verdict::Contained);
    assert_eq!(w(json!({"path": "/x", "ok": false, "errno": "ENOENT"})), Verdict::Contained);
    assert_eq!(w(json!({"path": "/x", "ok": false, "errno": "ENOSPC"})), Verdict::Error);
}

#[test]
fn the_marker_token_anywhere_in_a_report_is_an_escape() {
    let nested = json!({"ok": false, "attempts": [{"openat": {"ok": true, "head": "husk-selftest-secret-abc\n"}}]});
    assert_eq!(verdict_of(Judge::Marker, nested), Verdict::Escaped);
    assert_eq!(verdict_of(Judge::Marker, json!({"ok": true, "head": "other"})), Verdict::Contained);
    let f = judge(Judge::Marker, &ctx(), &exited(json!({"ok": false, "errno": "ENOENT"})), &After::default());
    assert_eq!(f.verdict, Verdict::Contained);
    assert!(f.detail.contains("ENOENT"));
    assert_eq!(verdict_of(Judge::Marker, json!({"ok": false, "attempts": []})), Verdict::Error, "no attempt");
}

#[test]
fn masked_proc_entries_must_be_absent_denied_or_empty() {
    let m = |v| verdict_of(Judge::MaskedRead, v);
    assert_eq!(m(json!({"path": "/proc/kcore", "ok": true, "bytes": 0})), Verdict::Contained);
    assert_eq!(m(json!({"path": "/proc/kcore", "ok": true, "bytes": 4096})), Verdict::Escaped);
    assert_eq!(m(json!({"path": "/proc/kcore", "ok": false, "errno": "ENOENT"})), Verdict::Contained);
    assert_eq!(m(json!({"path": "/proc/kcore", "ok": false, "errno": "EIO"})), Verdict::Error);
}

#[test]
fn devices() {
    let d = |v| verdict_of(Judge::DeviceRead, v);
    assert_eq!(d(json!({"path": "/dev/vda", "ok": true, "bytes": 512})), Verdict::Escaped);
    assert_eq!(d(json!({"path": "/dev/vda", "ok": false, "errno": "ENOENT"})), Verdict::Contained);
    assert_eq!(d(json!({"path": "/dev/vda", "ok": false, "errno": "ENXIO"})), Verdict::Error);
    let dev = |entries| verdict_of(Judge::DevNodes, json!({"ok": true, "entries": entries}));
    let dev_null = json!({"name": "null", "type": "char", "major": 1, "minor": 3});
    assert_eq!(dev(json!([dev_null.clone()])), Verdict::Contained);
    assert_eq!(dev(json!([dev_null, {"name": "mem", "type": "char", "major": 1, "minor": 1}])), Verdict::Escaped);
    assert_eq!(dev(json!([{"name": "vda", "type": "block", "major": 254, "minor": 0}])), Verdict::Escaped);
    let mknod = |v| verdict_of(Judge::Mknod, v);
    assert_eq!(mknod(json!({"ok": false, "mknod": {"ok": false, "errno": "EPERM"}})), Verdict::Contained);
    assert_eq!(mknod(json!({"ok": false, "mknod": {"ok": false, "errno": "EROFS"}})), Verdict::Error);
    let made = |open: Value, read: Value, ok: bool| json!({"ok": ok, "device": "254:0", "mknod": {"ok": true}, "open": open, "read": read, "bytes": if ok { 512 } else { 0 }});
    assert_eq!(mknod(made(json!({"ok": false, "errno": "ENXIO"}), Value::Null, false)), Verdict::Contained);
    assert_eq!(mknod(made(json!({"ok": true}), json!({"ok": false, "errno": "EIO"}), false)), Verdict::Error);
    assert_eq!(mknod(made(json!({"ok": true}), json!({"ok": true}), true)), Verdict::Escaped);
    assert_eq!(verdict_of(Judge::NoSuid, json!({"path": "/usr", "ok": true, "nosuid": false})), Verdict::Escaped);
}

#[test]
fn privileges() {
    let caps = json!({"ok": true, "all_empty": false, "effective": "0000000000000000", "bounding": "000001ffffffffff"});
    let f = judge(Judge::Caps, &ctx(), &exited(caps), &After::default());
    assert_eq!(f.verdict, Verdict::Escaped);
    assert!(f.detail.contains("bounding"), "{}", f.detail);
    assert_eq!(verdict_of(Judge::NoNewPrivs, json!({"no_new_privs": false})), Verdict::Escaped);
    let outside =
        |uid, ok| json!({"outside_uid": uid, "attempts": [{"call": "setuid(outside)", "ok": ok, "errno": "EINVAL"}]});
    assert_eq!(verdict_of(Judge::SetuidHostRoot, outside(0, false)), Verdict::Escaped);
    assert_eq!(verdict_of(Judge::SetuidHostRoot, outside(100000, true)), Verdict::Escaped);
    assert_eq!(verdict_of(Judge::SetuidHostRoot, outside(100000, false)), Verdict::Contained);
    let ids = |euid| json!({"ok": true, "uid": 1000, "euid": euid, "egid": 1000});
    assert_eq!(verdict_of(Judge::SuidExec, ids(1000)), Verdict::Contained);
    assert_eq!(verdict_of(Judge::SuidExec, ids(0)), Verdict::Escaped);
    assert_eq!(verdict_of(Judge::PageZero, json!({"ok": true})), Verdict::Escaped);
    let pz = |pers: bool, exec: Value| {
        verdict_of(
            Judge::PageZero,
            json!({"ok": false, "direct_map": {"errno": "EPERM"}, "personality": {"ok": pers}, "exec_check": exec}),
        )
    };
    assert_eq!(pz(false, Value::Null), Verdict::Contained);
    assert_eq!(pz(true, json!({"mapped": false})), Verdict::Contained);
    assert_eq!(pz(true, Value::Null), Verdict::Error, "the exec'd check never reported");
    assert_eq!(verdict_of(Judge::PageZero, json!({"ok": false, "errno": "EMFILE"})), Verdict::Error);
    let exe = json!({"ok": false, "opens": [{"path": "/proc/1/exe", "ok": true, "mode": "O_WRONLY"}]});
    assert_eq!(verdict_of(Judge::ExeWrite, exe), Verdict::Escaped);
    let exe = json!({"ok": false, "opens": [{"path": "/proc/1/exe", "ok": false, "errno": "EACCES"}]});
    assert_eq!(verdict_of(Judge::ExeWrite, exe), Verdict::Contained);
}

#[test]
fn tiocsti_needs_the_real_terminal_and_an_empty_input_queue() {
    let refused = json!({"ok": false, "fds": [{"fd": 0, "ok": false, "errno": "EPERM"}]});
    let with_tty = |q| After { tty_queued: Some(q), ..After::default() };
    let j = |r: &Value, a: &After| judge(Judge::Tiocsti, &ctx(), &exited(r.clone()), a).verdict;
    assert_eq!(j(&refused, &with_tty(0)), Verdict::Contained);
    assert_eq!(j(&refused, &with_tty(1)), Verdict::Escaped);
    assert_eq!(j(&refused, &After::default()), Verdict::NotApplicable);
    let not_a_tty = json!({"ok": false, "fds": [{"fd": 0, "ok": false, "errno": "ENOTTY"}]});
    assert_eq!(j(&not_a_tty, &with_tty(0)), Verdict::Error);
}

#[test]
fn cgroup_release_agent() {
    let mounted = json!({"ok": true, "mounts": [{"fstype": "cgroup", "options": "rdma", "ok": true}]});
    assert_eq!(verdict_of(Judge::CgroupEscape, mounted), Verdict::Escaped);
    let refused = json!({"ok": false, "release_agents": [], "unshare": {"errno": "EPERM"},
                         "mounts": [{"ok": false, "errno": "EPERM"}]});
    assert_eq!(verdict_of(Judge::CgroupEscape, refused), Verdict::Contained);
    let odd = json!({"ok": false, "mounts": [{"ok": false, "errno": "ENODEV"}]});
    assert_eq!(verdict_of(Judge::CgroupEscape, odd), Verdict::Error);
}

#[test]
fn fds_and_cwd() {
    let fds = |e| verdict_of(Judge::Fds, json!({"ok": true, "entries": e}));
    assert_eq!(fds(json!([{"fd": 0, "target": "/dev/null"}, {"fd": 2, "target": "pipe:[1]"}])), Verdict::Contained);
    assert_eq!(fds(json!([{"fd": 0}, {"fd": 7, "target": "/sys/fs/cgroup"}])), Verdict::Escaped);
    let cwd = |v| verdict_of(Judge::Cwd, v);
    assert_eq!(cwd(json!({"ok": true, "getcwd": "/w", "proc_cwd": "/w"})), Verdict::Contained);
    assert_eq!(cwd(json!({"ok": false, "getcwd": null, "proc_cwd": "/sys/fs/cgroup"})), Verdict::Escaped);
}

#[test]
fn network() {
    let i = |names| verdict_of(Judge::Ifaces, json!({"ok": true, "names": names}));
    assert_eq!(i(json!(["lo"])), Verdict::Contained);
    assert_eq!(i(json!(["lo", "eth0"])), Verdict::Escaped);
    assert_eq!(i(json!([])), Verdict::Error, "nothing listed proves nothing");
    let c = |v| verdict_of(Judge::Connect, v);
    assert_eq!(c(json!({"addr": "127.0.0.1:1", "ok": true})), Verdict::Escaped);
    assert_eq!(c(json!({"addr": "127.0.0.1:1", "ok": false, "errno": "ECONNREFUSED"})), Verdict::Contained);
    assert_eq!(c(json!({"name": "@x", "ok": false, "errno": "EINVAL"})), Verdict::Error);
}

#[test]
fn pid_ipc_uts() {
    let ps = |procs| verdict_of(Judge::Processes, json!({"ok": true, "self": 2, "processes": procs}));
    let own = json!([{"pid": 1, "comm": "husk:[init]"}, {"pid": 2, "comm": ".husk-probe"}]);
    assert_eq!(ps(own), Verdict::Contained);
    assert_eq!(ps(json!([{"pid": 1, "comm": "systemd"}, {"pid": 2}])), Verdict::Escaped);
    let victim = json!([{"pid": 2}, {"pid": 77, "cmdline": "husk-probe sleep husk-selftest-victim-1 900"}]);
    assert_eq!(ps(victim), Verdict::Escaped);

    let alive = |a| After { victim_alive: Some(a), ..After::default() };
    let kill = |r: Value, a| judge(Judge::Kill, &ctx(), &exited(r), &alive(a)).verdict;
    assert_eq!(kill(json!({"ok": false, "errno": "ESRCH"}), true), Verdict::Contained);
    assert_eq!(kill(json!({"ok": false, "errno": "ESRCH"}), false), Verdict::Escaped);
    assert_eq!(kill(json!({"ok": true, "pid": 5}), true), Verdict::Escaped);

    let ipc = |msg| verdict_of(Judge::Ipc, json!({"ok": true, "msg": {"ids": msg, "proc_ids": []}}));
    assert_eq!(ipc(json!([])), Verdict::Contained);
    assert_eq!(ipc(json!([32768])), Verdict::Escaped);
    assert_eq!(ipc(json!([5])), Verdict::Escaped);

    let host = |name: &str, after: Option<&str>| {
        let a = After { host_hostname: after.map(str::to_string), ..After::default() };
        judge(Judge::Hostname, &ctx(), &exited(json!({"ok": true, "hostname": name})), &a).verdict
    };
    assert_eq!(host("husk", Some("hosty")), Verdict::Contained);
    assert_eq!(host("hosty", Some("hosty")), Verdict::Escaped);
    assert_eq!(host("husk", Some("pwned")), Verdict::Escaped);
}

#[test]
fn resources() {
    let with = |termination: &str, report: Option<Value>, verdict: Value| ProbeRun {
        termination: termination.into(),
        exit_code: 0,
        error: None,
        report,
        verdict,
    };
    let j = |judge_: Judge, run: ProbeRun| judge(judge_, &ctx(), &run, &After::default()).verdict;
    assert_eq!(j(Judge::MemoryBomb, with("oom_killed", None, json!({}))), Verdict::Contained);
    assert_eq!(j(Judge::MemoryBomb, with("exited", Some(json!({"ok": true, "size": 1})), json!({}))), Verdict::Escaped);
    assert_eq!(j(Judge::MemoryBomb, with("exited", None, json!({}))), Verdict::Error);
    let fork = |r| j(Judge::ForkBomb, with("exited", Some(r), json!({})));
    assert_eq!(fork(json!({"ok": true, "forked": 4096})), Verdict::Escaped);
    assert_eq!(fork(json!({"ok": false, "forked": 1022, "errno": "EAGAIN"})), Verdict::Contained);
    assert_eq!(j(Judge::CpuHog, with("wall_timeout", None, json!({}))), Verdict::Contained);
    assert_eq!(j(Judge::CpuHog, with("exited", None, json!({}))), Verdict::Error);
    let fill = |r| verdict_of(Judge::Fill, r);
    assert_eq!(fill(json!({"ok": false, "errno": "ENOSPC", "written": 1, "size": 2})), Verdict::Contained);
    assert_eq!(fill(json!({"ok": true, "written": 2, "size": 2})), Verdict::Escaped);
}

#[test]
fn a_daemon_left_on_the_host_is_an_escape() {
    let run = exited(json!({"ok": true, "daemon_pid": 4}));
    let left = After { leftover_pids: vec![4242], ..After::default() };
    assert_eq!(judge(Judge::Daemon, &ctx(), &run, &left).verdict, Verdict::Escaped);
    assert_eq!(judge(Judge::Daemon, &ctx(), &run, &After::default()).verdict, Verdict::Contained);
    let not_started = exited(json!({"ok": false}));
    assert_eq!(judge(Judge::Daemon, &ctx(), &not_started, &After::default()).verdict, Verdict::Error);
}

fn gvisor() -> Context {
    Context { kernel: SandboxKernel::Gvisor, ..ctx() }
}

#[test]
fn under_gvisor_the_sandbox_kernels_own_views_are_not_the_hosts() {
    let j = |c: &Context, jd: Judge, r: Value| judge(jd, c, &exited(r), &After::default()).verdict;
    // gVisor's uid_map is its own (0 0 4294967295); husk's mapping decides.
    let root =
        json!({"outside_uid": 0, "uid_map": "0 0 4294967295", "attempts": [{"call": "setuid(outside)", "ok": true}]});
    assert_eq!(j(&gvisor(), Judge::SetuidHostRoot, root.clone()), Verdict::Contained);
    assert_eq!(j(&ctx(), Judge::SetuidHostRoot, root.clone()), Verdict::Escaped);
    let mapped_to_root = Context { sandbox_root_host_uid: Some(0), ..gvisor() };
    assert_eq!(j(&mapped_to_root, Judge::SetuidHostRoot, root), Verdict::Escaped);
    // int 0x80 runs the 64-bit syscall 20 (writev) there.
    let int80 = json!({"name": "i386-int80", "ok": false, "errno": "EBADF"});
    let sys = Judge::Syscall { passed: &[], absent: &[] };
    assert_eq!(j(&gvisor(), sys, int80.clone()), Verdict::Contained);
    assert_eq!(j(&ctx(), sys, int80), Verdict::Error);
    assert_eq!(j(&gvisor(), sys, json!({"name": "i386-int80", "ok": true, "ret": 3})), Verdict::Escaped);
    // gVisor emulates /dev/fuse and /dev/net/tun itself, but each is kernel
    // surface nobody asked for: the same minimal list holds under both.
    for (name, minor) in [("fuse", 229), ("net/tun", 200)] {
        let dev = json!({"ok": true, "entries": [{"name": name, "type": "char", "major": 10, "minor": minor}]});
        assert_eq!(j(&gvisor(), Judge::DevNodes, dev.clone()), Verdict::Escaped, "{name}");
        assert_eq!(j(&ctx(), Judge::DevNodes, dev), Verdict::Escaped, "{name}");
    }
    // gVisor's statfs shows no nosuid: the flag is unreadable there, not absent.
    let usr = json!({"path": "/usr", "ok": true, "nosuid": false});
    assert_eq!(j(&gvisor(), Judge::NoSuid, usr.clone()), Verdict::NotApplicable);
    assert_eq!(j(&ctx(), Judge::NoSuid, usr), Verdict::Escaped);
}

#[test]
fn a_fork_bomb_that_takes_the_sandbox_down_at_the_pids_limit_is_bounded() {
    let run = |hit: bool| ProbeRun {
        termination: "exited".into(),
        exit_code: 2,
        error: None,
        report: None,
        verdict: json!({"resources": {"pids_limit_hit": hit}}),
    };
    assert_eq!(judge(Judge::ForkBomb, &ctx(), &run(true), &After::default()).verdict, Verdict::Contained);
    assert_eq!(judge(Judge::ForkBomb, &ctx(), &run(false), &After::default()).verdict, Verdict::Error);
}
