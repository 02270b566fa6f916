//! Seccomp profiles: parse -> lower -> compile must never panic, and the
//! compiled program must mean what the profile says.
//!
//! The oracle is a direct reading of the lowered `Policy` (first matching
//! entry wins, else the default; a rule is an AND of comparisons on the
//! argument, its low 32 bits for `dword` arguments), evaluated next to the
//! BPF interpreter (`seccomp::eval`) on syscalls and arguments chosen at the
//! edges of every comparison the profile makes. Foreign ABIs (i386, the x32
//! bit) must be killed whatever the profile says.

use super::Bytes;
use husk::seccomp::compile::{self, MAX_INSNS, RET_KILL_PROCESS, X32_SYSCALL_BIT, ret_value};
use husk::seccomp::eval::{self, Data};
use husk::seccomp::profile::{self, Cond, Context, Op, Policy};
use husk::seccomp::syscalls::X86_64;
use serde_json::{Value, json};

const AUDIT_ARCH_I386: u32 = 0x4000_0003;
/// Bound on interpreter runs per input, to keep executions fast.
const MAX_SAMPLES: usize = 4096;

/// Arbitrary bytes as profile JSON.
pub fn profile_json(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        check(text);
    }
}

/// A structurally valid profile generated from the bytes (reaches lowering
/// and compilation far more often than mutated JSON does).
pub fn generated_policy(data: &[u8]) {
    let text = generate(&mut Bytes::new(data)).to_string();
    check(&text);
}

fn has_cap(name: &str) -> Option<bool> {
    name.strip_prefix("CAP_").filter(|n| !n.is_empty()).map(|n| n == "SYS_ADMIN")
}

fn check(text: &str) {
    let Ok(raw) = profile::parse("fuzz", text) else { return };
    let ctx = Context { has_cap: &has_cap, kernel: Some((6, 1)) };
    let Ok(policy) = raw.lower("fuzz", &ctx) else { return };
    let program = match compile::compile("fuzz", &policy) {
        Ok(p) => p,
        Err(compile::CompileError::TooLarge { len, .. }) => {
            assert!(len > MAX_INSNS, "TooLarge for {len} instructions");
            return;
        }
        Err(_) => return,
    };
    assert!(program.len() <= MAX_INSNS);
    let i386 = Data { nr: 39, arch: AUDIT_ARCH_I386, ip: 0, args: [0; 6] };
    assert_eq!(eval::run(&program, &i386), RET_KILL_PROCESS, "an i386 syscall got past the filter");
    for nr in [0u32, 39, 59, 435] {
        let x32 = Data::syscall((nr | X32_SYSCALL_BIT) as i32, &[]);
        assert_eq!(eval::run(&program, &x32), RET_KILL_PROCESS, "x32 syscall {nr} got past the filter");
    }
    for (nr, args) in samples(&policy) {
        let got = eval::run(&program, &Data::syscall(nr as i32, &args));
        let want = reference(&policy, nr, &args);
        assert_eq!(
            got, want,
            "compiled program and profile disagree on syscall {nr} args {args:x?}: program {got:#x}, profile {want:#x}\n\
             policy: {policy:?}\nprofile: {text}"
        );
    }
}

/// What the policy means for one x86_64 syscall: the first entry naming it
/// whose rules hold (any rule; all conditions of a rule) decides.
pub fn reference(policy: &Policy, nr: u32, args: &[u64; 6]) -> u32 {
    if nr & X32_SYSCALL_BIT != 0 && nr != u32::MAX {
        return RET_KILL_PROCESS;
    }
    let act = policy
        .entries
        .iter()
        .filter(|e| e.syscalls.contains(&nr))
        .find(|e| e.rules.is_empty() || e.rules.iter().any(|r| r.iter().all(|c| holds(c, args))))
        .map(|e| e.action)
        .unwrap_or(policy.default);
    ret_value(act)
}

fn holds(c: &Cond, args: &[u64; 6]) -> bool {
    let mut a = args[usize::from(c.index)];
    if c.dword {
        a &= 0xffff_ffff;
    }
    match c.op {
        Op::Ne => a != c.value,
        Op::Lt => a < c.value,
        Op::Le => a <= c.value,
        Op::Eq => a == c.value,
        Op::Ge => a >= c.value,
        Op::Gt => a > c.value,
        Op::MaskedEq(m) => a & m == c.value,
    }
}

/// Values around a comparison's constant, both halves of the register.
fn edges(c: &Cond) -> Vec<u64> {
    let v = c.value;
    let mut out = vec![v, v.wrapping_sub(1), v.wrapping_add(1), 0, u64::MAX, v | 1 << 32, v ^ 0xffff_ffff_0000_0000];
    if let Op::MaskedEq(m) = c.op {
        out.extend([v | !m, v ^ m, m, !m]);
    }
    out
}

/// A value that satisfies `c` (for exercising ANDed conditions together).
fn satisfying(c: &Cond) -> u64 {
    match c.op {
        Op::Ne | Op::Gt => c.value.wrapping_add(1),
        Op::Lt => c.value.wrapping_sub(1),
        _ => c.value,
    }
}

fn samples(policy: &Policy) -> Vec<(u32, [u64; 6])> {
    let mut nrs: Vec<u32> = policy.entries.iter().flat_map(|e| e.syscalls.iter().copied()).collect();
    let top = X86_64.iter().map(|(n, _)| *n).max().unwrap_or(0);
    nrs.extend([0, 1, top, top + 1, 1000, u32::MAX, 0x3fff_ffff]);
    nrs.sort_unstable();
    nrs.dedup();
    let mut out = Vec::new();
    for nr in nrs {
        out.push((nr, [0; 6]));
        for e in policy.entries.iter().filter(|e| e.syscalls.contains(&nr)) {
            for rule in &e.rules {
                let mut all = [0u64; 6];
                rule.iter().for_each(|c| all[usize::from(c.index)] = satisfying(c));
                out.push((nr, all));
                for c in rule {
                    for v in edges(c) {
                        let mut one = all;
                        one[usize::from(c.index)] = v;
                        out.push((nr, one));
                        let mut alone = [0u64; 6];
                        alone[usize::from(c.index)] = v;
                        out.push((nr, alone));
                    }
                }
            }
        }
        if out.len() >= MAX_SAMPLES {
            out.truncate(MAX_SAMPLES);
            break;
        }
    }
    out
}

const ACTIONS: &[&str] = &[
    "SCMP_ACT_ALLOW",
    "SCMP_ACT_ERRNO",
    "SCMP_ACT_KILL",
    "SCMP_ACT_KILL_THREAD",
    "SCMP_ACT_KILL_PROCESS",
    "SCMP_ACT_TRAP",
    "SCMP_ACT_TRACE",
    "SCMP_ACT_LOG",
    "SCMP_ACT_NOTIFY",
];
const OPS: &[&str] =
    &["SCMP_CMP_NE", "SCMP_CMP_LT", "SCMP_CMP_LE", "SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_MASKED_EQ"];
/// Names with 32-bit arguments (profile::DWORD_ARGS) and a few others,
/// weighted in next to the whole table.
const FAVOURITES: &[&str] =
    &["ioctl", "clone", "socket", "socketpair", "personality", "prctl", "fcntl", "setns", "read", "mmap", "nope_call"];
const VALUES: &[u64] = &[
    0,
    1,
    2,
    0x5412,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 32,
    0xffff_ffff_8000_0000,
    0xffff_ffff_ffff_fffe,
    u64::MAX,
    0x7e02_0000,
];

fn value(b: &mut Bytes<'_>) -> u64 {
    if b.bool() { b.pick(VALUES) } else { b.u64() }
}

fn name(b: &mut Bytes<'_>) -> &'static str {
    if b.bool() { b.pick(FAVOURITES) } else { X86_64[b.below(X86_64.len())].1 }
}

/// A profile built from choices: actions, names, errnos, argument rules,
/// includes/excludes, architectures.
pub fn generate(b: &mut Bytes<'_>) -> Value {
    let mut p = json!({"defaultAction": b.pick(ACTIONS)});
    if b.bool() {
        p["defaultErrnoRet"] = json!(b.u8() % 100);
    }
    if b.below(4) == 0 {
        p["architectures"] =
            json!(["SCMP_ARCH_X86_64", b.pick(&["SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_NATIVE"])]);
    }
    let mut syscalls = Vec::new();
    for _ in 0..b.below(8) {
        let names: Vec<&str> = (0..1 + b.below(3)).map(|_| name(b)).collect();
        let mut e = json!({"names": names, "action": b.pick(ACTIONS)});
        if b.bool() {
            e["errnoRet"] = json!(u32::from(b.u8()) * u32::from(b.u8() % 20));
        }
        let args: Vec<Value> = (0..b.below(4))
            .map(|_| {
                let mut a = json!({"index": b.below(7), "value": value(b), "op": b.pick(OPS)});
                if b.bool() {
                    a["valueTwo"] = json!(value(b));
                }
                a
            })
            .collect();
        if !args.is_empty() {
            e["args"] = json!(args);
        }
        match b.below(8) {
            0 => e["includes"] = json!({"caps": [b.pick(&["CAP_SYS_ADMIN", "CAP_NET_RAW", "NOT_A_CAP"])]}),
            1 => e["excludes"] = json!({"caps": [b.pick(&["CAP_SYS_ADMIN", "CAP_NET_RAW"])]}),
            2 => e["includes"] = json!({"minKernel": b.pick(&["4.8", "7.0", "x"])}),
            3 => e["includes"] = json!({"arches": [b.pick(&["amd64", "arm64", "s390x"])]}),
            _ => {}
        }
        syscalls.push(e);
        if b.is_empty() {
            break;
        }
    }
    p["syscalls"] = json!(syscalls);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use husk::seccomp::profile::Act;

    #[test]
    fn the_shipped_profiles_agree_with_their_programs() {
        for name in husk::seccomp::shipped_names() {
            // This crate sits at tests/fuzz-harness; the profiles at the top of the repository.
            let path = format!("{}/../../seccomp/{name}.json", env!("CARGO_MANIFEST_DIR"));
            check(&std::fs::read_to_string(path).unwrap());
        }
    }

    #[test]
    fn the_reference_reads_first_match_and_low_halves() {
        let text = r#"{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38, "syscalls": [
            {"names": ["ioctl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
             "args": [{"index": 1, "value": 21522, "op": "SCMP_CMP_EQ"}]},
            {"names": ["ioctl", "read"], "action": "SCMP_ACT_ALLOW"}]}"#;
        let raw = profile::parse("t", text).unwrap();
        let policy = raw.lower("t", &Context { has_cap: &has_cap, kernel: None }).unwrap();
        let ioctl = 16;
        assert_eq!(reference(&policy, ioctl, &[0, 21522, 0, 0, 0, 0]), ret_value(Act::Errno(1)));
        assert_eq!(reference(&policy, ioctl, &[0, 21522 | 1 << 32, 0, 0, 0, 0]), ret_value(Act::Errno(1)));
        assert_eq!(reference(&policy, ioctl, &[0, 1, 0, 0, 0, 0]), ret_value(Act::Allow));
        assert_eq!(reference(&policy, 999, &[0; 6]), ret_value(Act::Errno(38)));
        check(text);
    }

    #[test]
    fn generated_profiles_are_valid_json_profiles() {
        let mut parsed = 0;
        for seed in 0..200u64 {
            let data: Vec<u8> = (0..64).map(|i| (seed.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8).collect();
            let text = generate(&mut Bytes::new(&data)).to_string();
            parsed += usize::from(profile::parse("t", &text).is_ok());
            generated_policy(&data);
        }
        assert_eq!(parsed, 200, "every generated profile parses");
    }
}
