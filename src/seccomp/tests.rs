//! Profiles and programs as values: parsed, lowered, compiled, and run
//! through the BPF interpreter (the kernel-side tests are in
//! tests/seccomp.rs).

use super::compile::{self, RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS, RET_USER_NOTIF};
use super::eval::{self, Data};
use super::*;

const EPERM: u32 = RET_ERRNO | 1;
const ENOSYS: u32 = RET_ERRNO | 38;
const EAFNOSUPPORT: u32 = RET_ERRNO | 97;

fn nr(name: &str) -> i32 {
    syscalls::X86_64.iter().find(|(_, n)| *n == name).unwrap_or_else(|| panic!("no syscall {name}")).0 as i32
}

fn verdict(program: &[SockFilter], name: &str, args: &[u64]) -> u32 {
    eval::run(program, &Data::syscall(nr(name), args))
}

fn compile_str(text: &str) -> Result<Vec<SockFilter>, String> {
    compile_text("test.json", text, 0, Some((6, 18))).map(|c| c.filter).map_err(|e| e.to_string())
}

fn raw(p: &[SockFilter]) -> Vec<(u16, u8, u8, u32)> {
    p.iter().map(|f| (f.code, f.jt, f.jf, f.k)).collect()
}

const CLONE_NEW: &[u64] = &[0x0002_0000, 0x0200_0000, 0x0400_0000, 0x0800_0000, 0x1000_0000, 0x2000_0000, 0x4000_0000];
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541c;

#[test]
fn shipped_profiles_compile_to_the_programs_built_into_the_binary() {
    assert_eq!(shipped_names(), ["default", "strict"]);
    for s in SHIPPED {
        let c = compile_text(s.name, s.json, 0, None).unwrap();
        assert_eq!(raw(&c.filter), raw(s.filter), "{}: build.rs and the runtime compiler disagree", s.name);
        assert_eq!(s.sha256, hex::encode(sha2::Sha256::digest(s.json.as_bytes())));
        assert!(c.ignored_names.is_empty(), "{}: {:?}", s.name, c.ignored_names);
        assert!(s.filter.len() <= compile::MAX_INSNS);
    }
}

#[test]
fn both_profiles_deny_the_dangerous_syscalls_with_eperm() {
    for s in SHIPPED {
        for name in DENIED_EPERM {
            assert_eq!(verdict(s.filter, name, &[]), EPERM, "{}: {name}", s.name);
        }
        assert_eq!(verdict(s.filter, "clone3", &[]), ENOSYS, "{}: clone3 must be ENOSYS for libc's fallback", s.name);
        for flag in CLONE_NEW {
            assert_eq!(verdict(s.filter, "clone", &[flag | 17]), EPERM, "{}: clone({flag:#x})", s.name);
        }
        for req in [TIOCSTI, TIOCLINUX, TIOCSTI | 1 << 32, TIOCLINUX | 0xffff_0000_0000_0000] {
            assert_eq!(verdict(s.filter, "ioctl", &[0, req]), EPERM, "{}: ioctl({req:#x})", s.name);
        }
    }
}

#[test]
fn both_profiles_allow_what_ordinary_programs_do() {
    // fork (SIGCHLD) and pthread_create's clone flags.
    let thread = 0x003d_0f00u64;
    for s in SHIPPED {
        for (name, args) in [
            ("read", &[][..]),
            ("openat", &[]),
            ("execve", &[]),
            ("clone", &[17]),
            ("clone", &[thread]),
            ("ioctl", &[1, 0x5401]),
            ("socket", &[1, 1, 0]),
            ("socket", &[10, 1, 0]),
            ("futex", &[]),
            ("rseq", &[]),
            ("getrandom", &[]),
            ("sendmsg", &[]),
            ("seccomp", &[]),
            ("wait4", &[]),
        ] {
            assert_eq!(verdict(s.filter, name, args), RET_ALLOW, "{}: {name}{args:x?}", s.name);
        }
    }
}

#[test]
fn unknown_syscalls_get_enosys_and_foreign_abis_are_killed() {
    for s in SHIPPED {
        assert_eq!(eval::run(s.filter, &Data::syscall(1000, &[])), ENOSYS, "{}: unknown nr", s.name);
        assert_eq!(eval::run(s.filter, &Data::syscall(-1, &[])), ENOSYS, "{}: nr -1 (ptrace skip)", s.name);
        assert_eq!(verdict(s.filter, "sysfs", &[]), ENOSYS, "{}: a syscall the profile does not list", s.name);
        let x32_getpid = Data::syscall(nr("getpid") | 0x4000_0000, &[]);
        assert_eq!(eval::run(s.filter, &x32_getpid), RET_KILL_PROCESS, "{}: x32", s.name);
        let x32_only = Data::syscall(0x4000_0000 | 520, &[]);
        assert_eq!(eval::run(s.filter, &x32_only), RET_KILL_PROCESS, "{}: x32 execve", s.name);
        let i386_getpid = Data { nr: 20, arch: 0x4000_0003, ..Data::default() };
        assert_eq!(eval::run(s.filter, &i386_getpid), RET_KILL_PROCESS, "{}: i386", s.name);
    }
}

#[test]
fn strict_adds_ptrace_socket_family_and_personality_denials() {
    let default = shipped("default").unwrap().filter;
    let strict = shipped("strict").unwrap().filter;
    for name in ["ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd"] {
        assert_eq!(verdict(default, name, &[]), RET_ALLOW, "default: {name}");
        assert_eq!(verdict(strict, name, &[]), EPERM, "strict: {name}");
    }
    for family in [1u64, 2, 10] {
        assert_eq!(verdict(strict, "socket", &[family, 1, 0]), RET_ALLOW, "strict: family {family}");
        assert_eq!(verdict(strict, "socketpair", &[family, 1, 0]), RET_ALLOW, "strict: family {family}");
    }
    for family in [16u64, 17, 40, 38, 16 | 1 << 32] {
        assert_eq!(verdict(default, "socket", &[family, 3, 0]), RET_ALLOW, "default: family {family}");
        assert_eq!(verdict(strict, "socket", &[family, 3, 0]), EAFNOSUPPORT, "strict: family {family:#x}");
    }
    for persona in [0u64, 0xffff_ffff, u64::MAX] {
        assert_eq!(verdict(strict, "personality", &[persona]), RET_ALLOW, "strict: personality({persona:#x})");
    }
    for persona in [8u64, 0x0002_0000] {
        assert_eq!(verdict(default, "personality", &[persona]), RET_ALLOW, "default: personality({persona:#x})");
        assert_eq!(verdict(strict, "personality", &[persona]), EPERM, "strict: personality({persona:#x})");
    }
    // READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO: refused by both.
    for persona in [0x0040_0000u64, 0x0004_0000, 0x0010_0000] {
        assert_eq!(verdict(default, "personality", &[persona]), EPERM, "default: personality({persona:#x})");
        assert_eq!(verdict(strict, "personality", &[persona]), EPERM, "strict: personality({persona:#x})");
    }
}

#[test]
fn explain_mode_notifies_exactly_where_the_filter_returns_an_errno() {
    let enforcing = shipped("default").unwrap().filter;
    let notify = compile::notify_variant(enforcing);
    for (name, args) in [("mount", &[][..]), ("clone3", &[]), ("ioctl", &[0, TIOCSTI]), ("read", &[]), ("sysfs", &[])] {
        let data = Data::syscall(nr(name), args);
        let (e, n) = (eval::run(enforcing, &data), eval::run(&notify, &data));
        if e == RET_ALLOW {
            assert_eq!(n, RET_ALLOW, "{name}");
        } else {
            assert_eq!(n, RET_USER_NOTIF, "{name}");
            assert_eq!(
                notify::errno_for(enforcing, &data) as u32,
                e & 0xffff,
                "{name}: answered with the profile's errno"
            );
        }
    }
    let i386 = Data { nr: 20, arch: 0x4000_0003, ..Data::default() };
    assert_eq!(eval::run(&notify, &i386), RET_KILL_PROCESS, "kills stay kills");
}

#[test]
fn first_matching_entry_wins_in_file_order() {
    let allow_then_deny = r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["mkdir"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["mkdir", "rmdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]}"#;
    let p = compile_str(allow_then_deny).unwrap();
    assert_eq!(verdict(&p, "mkdir", &[]), RET_ALLOW);
    assert_eq!(verdict(&p, "rmdir", &[]), RET_ERRNO | 13);
    assert_eq!(verdict(&p, "read", &[]), RET_ALLOW);
    let deny_then_allow = r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"},
        {"names": ["mkdir"], "action": "SCMP_ACT_ALLOW"}]}"#;
    assert_eq!(verdict(&compile_str(deny_then_allow).unwrap(), "mkdir", &[]), EPERM, "errno without errnoRet is EPERM");
}

#[test]
fn docker_format_extensions_are_honoured() {
    let text = r#"{
      "defaultAction": "SCMP_ACT_ERRNO", "defaultErrno": "ENOSYS",
      "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]}],
      "syscalls": [
        {"names": ["read", "write", "_llseek", "chown32"], "action": "SCMP_ACT_ALLOW", "args": null, "comment": "", "includes": {}, "excludes": {}},
        {"names": ["arm_fadvise64_64", "mkdir"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["arm", "arm64"]}},
        {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64", "x32"]}},
        {"names": ["chroot"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_CHROOT"]}},
        {"names": ["chroot"], "action": "SCMP_ACT_ERRNO", "errno": "EACCES", "excludes": {"caps": ["CAP_SYS_CHROOT"]}},
        {"names": ["listmount"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "6.8"}},
        {"names": ["fchmodat2"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "7.1"}},
        {"name": "getpid", "action": "SCMP_ACT_TRACE"},
        {"names": ["kill"], "action": "SCMP_ACT_ALLOW",
         "args": [{"index": 1, "value": 0, "op": "SCMP_CMP_EQ"}, {"index": 1, "value": 15, "op": "SCMP_CMP_EQ"}]},
        {"names": ["mmap"], "action": "SCMP_ACT_ALLOW",
         "args": [{"index": 2, "value": 4, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}, {"index": 3, "value": 2, "op": "SCMP_CMP_EQ"}]}
      ]}"#;
    let c = compile_text("docker.json", text, 0, Some((6, 18))).unwrap();
    let p = &c.filter;
    assert_eq!(c.ignored_names, ["_llseek", "chown32"]);
    assert_eq!(c.foreign_arches, ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]);
    assert_eq!(verdict(p, "read", &[]), RET_ALLOW);
    assert_eq!(verdict(p, "mkdir", &[]), ENOSYS, "an arm-only entry does not apply on x86_64");
    assert_eq!(verdict(p, "arch_prctl", &[]), RET_ALLOW);
    assert_eq!(verdict(p, "chroot", &[]), RET_ERRNO | 13, "without the capability: the excludes entry");
    assert_eq!(verdict(p, "listmount", &[]), RET_ALLOW, "minKernel 6.8 <= 6.18");
    assert_eq!(verdict(p, "fchmodat2", &[]), ENOSYS, "minKernel 7.1 > 6.18");
    assert_eq!(verdict(p, "getpid", &[]), ENOSYS, "TRACE without a tracer is ENOSYS");
    // The same index twice: runc makes each condition its own rule (OR).
    assert_eq!(verdict(p, "kill", &[1, 0]), RET_ALLOW);
    assert_eq!(verdict(p, "kill", &[1, 15]), RET_ALLOW);
    assert_eq!(verdict(p, "kill", &[1, 9]), ENOSYS);
    // Different indexes: all must hold (AND).
    assert_eq!(verdict(p, "mmap", &[0, 4096, 3, 2]), RET_ALLOW);
    assert_eq!(verdict(p, "mmap", &[0, 4096, 7, 2]), ENOSYS);
    assert_eq!(verdict(p, "mmap", &[0, 4096, 3, 0x22]), ENOSYS);

    let with_cap = 1u64 << crate::capability::parse("CAP_SYS_CHROOT").unwrap();
    let c = compile_text("docker.json", text, with_cap, Some((6, 18))).unwrap();
    assert_eq!(verdict(&c.filter, "chroot", &[]), RET_ALLOW, "with the capability: the includes entry");
}

fn error_of(text: &str) -> String {
    compile_str(text).expect_err("profile should be rejected")
}

#[test]
fn malformed_profiles_name_the_field_and_value() {
    let cases: &[(&str, &[&str])] = &[
        (r#"{"defaultActoin": "SCMP_ACT_ALLOW"}"#, &["defaultActoin", "unknown field"]),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALOW"}]}"#,
            &["syscalls[0].action", "SCMP_ACT_ALOW"],
        ),
        (r#"{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": -1}"#, &["defaultErrnoRet", "-1"]),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"},
               {"names": ["mount"], "action": "SCMP_ACT_ERRNO", "errnoRet": 5000}]}"#,
            &["syscalls[1].errnoRet", "5000", "0..=4095"],
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO",
               "args": [{"index": 7, "value": 1, "op": "SCMP_CMP_EQ"}]}]}"#,
            &["syscalls[0].args[0].index", "7"],
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO",
               "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQUAL"}]}]}"#,
            &["syscalls[0].args[0].op", "SCMP_CMP_EQUAL"],
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_AMD64"]}"#,
            &["architectures[0]", "SCMP_ARCH_AMD64"],
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read", "Mount"], "action": "SCMP_ACT_ERRNO"}]}"#,
            &["syscalls[0].names[1]", "Mount"],
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["ioctl"], "action": "SCMP_ACT_ERRNO",
               "args": [{"index": 1, "value": 4294988818, "op": "SCMP_CMP_EQ"}]}]}"#,
            &["syscalls[0].args[0].value", "0x100005412", "32 bits"],
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_NOTIFY"}]}"#,
            &["syscalls[0].action", "SCMP_ACT_NOTIFY"],
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "flags": ["SECCOMP_FILTER_FLAG_MAGIC"]}"#,
            &["flags[0]", "SECCOMP_FILTER_FLAG_MAGIC"],
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
               "includes": {"caps": ["CAP_MAKE_COFFEE"]}}]}"#,
            &["syscalls[0].includes.caps[0]", "CAP_MAKE_COFFEE"],
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": [], "action": "SCMP_ACT_ALLOW"}]}"#,
            &["syscalls[0].names"],
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW""#,
            &["EOF"],
        ),
    ];
    for (text, wants) in cases {
        let e = error_of(text);
        assert!(e.contains("test.json"), "error names the file: {e}");
        for w in *wants {
            assert!(e.contains(w), "error for {text}\n  is: {e}\n  lacks: {w}");
        }
    }
}

#[test]
fn husk_seccomp_flags_map_to_specs() {
    assert_eq!(parse_arg("default"), Ok(SeccompSpec::Named("default".into())));
    assert_eq!(parse_arg("strict"), Ok(SeccompSpec::Named("strict".into())));
    assert_eq!(parse_arg("unconfined"), Ok(SeccompSpec::Unconfined));
    assert_eq!(parse_arg("./p.json"), Ok(SeccompSpec::File("./p.json".into())));
    assert!(parse_arg("defualt").unwrap_err().to_string().contains("default, strict"));
}

#[test]
fn explain_mode_refuses_what_it_cannot_do() {
    let root = std::path::Path::new("/nonexistent");
    assert!(matches!(plan(&SeccompSpec::Unconfined, true, 0, root), Err(SeccompError::ReportUnconfined)));
    assert!(plan(&SeccompSpec::Unconfined, false, 0, root).unwrap().is_none());
    let p = plan(&SeccompSpec::Named("strict".into()), true, 0, root).unwrap().unwrap();
    assert!(p.report() && p.installed().iter().any(|f| f.k == RET_USER_NOTIF));
    assert!(p.filter.iter().all(|f| f.k != RET_USER_NOTIF), "the enforcing program is kept for the answers");
}

#[test]
fn check_output_lists_decisions_per_syscall() {
    let s = shipped("default").unwrap();
    let raw = profile::parse("default", s.json).unwrap();
    let policy = raw.lower("default", &profile::Context { has_cap: &|_| Some(false), kernel: None }).unwrap();
    let h = explain::Header { profile: "default", sha256: s.sha256, instructions: s.filter.len() };
    let text = explain::text(&h, &policy);
    assert!(text.contains("errno EPERM"), "{text}");
    assert!(text.contains("clone: allow if arg0 & 0x7e020000 == 0x0; otherwise errno EPERM"), "{text}");
    let j = explain::json(&h, &policy);
    assert_eq!(j["syscalls"]["mount"], "errno EPERM");
    assert_eq!(j["syscalls"]["clone3"], "errno ENOSYS");
    assert_eq!(j["syscalls"]["read"], "allow");
    assert_eq!(j["syscalls"]["sysfs"], "errno ENOSYS");
    assert_eq!(j["syscalls"]["ioctl"][0]["action"], "errno EPERM");
}

#[test]
fn the_interpreter_kills_on_anything_the_kernel_would_reject() {
    use compile::insn;
    assert_eq!(eval::run(&[], &Data::default()), RET_KILL_PROCESS, "falling off the end");
    assert_eq!(eval::run(&[insn(0x20, 0, 0, 64)], &Data::default()), RET_KILL_PROCESS, "load past seccomp_data");
    assert_eq!(eval::run(&[insn(0x28, 0, 0, 0)], &Data::default()), RET_KILL_PROCESS, "half-word load");
    let a_from_x = [insn(0x01, 0, 0, 7), insn(0x87, 0, 0, 0), insn(0x16, 0, 0, 0)];
    assert_eq!(eval::run(&a_from_x, &Data::default()), 7, "ldx imm; txa; ret a");
}
