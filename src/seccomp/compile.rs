//! `Policy` -> classic BPF. seccompiler compiles the argument conditions;
//! husk lays out the rest, for what seccompiler cannot express:
//!
//! - **Dispatch by syscall number in O(log n).** seccompiler emits a linear
//!   chain of five instructions per syscall, one filter per action. For a
//!   300-syscall allowlist that is ~1800 instructions, and the kernel pays
//!   for every one of them at load time: it JITs the program and then, to
//!   build its per-syscall action cache, emulates the program once per
//!   syscall number and ABI. Measured (benches/seccomp.rs) that was ~0.85 ms
//!   per run. husk instead groups syscall numbers into intervals with the
//!   same unconditional action and emits a binary search over them: each
//!   leaf is a `ret` or, for a syscall whose action depends on arguments, a
//!   jump to that syscall's block.
//! - **Several actions per syscall.** A `SeccompFilter` has one match and one
//!   mismatch action. A syscall's block is a chain of seccompiler filters,
//!   one per run of same-action entries (first match wins, in file order),
//!   whose mismatch action is a sentinel rewritten into a jump to the next
//!   filter; the chain ends in the action that applies when no rule matches.
//! - **The foreign-ABI prologue.** seccompiler checks `arch`, but not the
//!   x32 bit: an x86_64 task can enter the kernel through the x32 table with
//!   `nr | 0x40000000` and the same `AUDIT_ARCH_X86_64`, reaching syscalls
//!   by numbers no rule was written for. The prologue kills the process for
//!   any arch other than x86_64 (i386 `int 0x80`) and for any nr with the x32
//!   bit, except -1 (what ptrace uses to skip a syscall).
//! - **32-bit arguments.** See `profile::DWORD_ARGS`.
//!
//! Also compiled by build.rs.

use super::profile::{Act, Cond, Op, Policy};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

pub type SockFilter = libc::sock_filter;

pub const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// BPF_MAXINSNS: the kernel refuses longer classic programs.
pub const MAX_INSNS: usize = 4096;

pub const BPF_LD_W_ABS: u16 = 0x20;
pub const BPF_JMP_JA: u16 = 0x05;
pub const BPF_JMP_JEQ_K: u16 = 0x15;
pub const BPF_JMP_JSET_K: u16 = 0x45;
pub const BPF_JMP_JGE_K: u16 = 0x35;
pub const BPF_RET_K: u16 = 0x06;

pub const OFFSET_NR: u32 = 0;
pub const OFFSET_ARCH: u32 = 4;

pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const RET_KILL_THREAD: u32 = 0;
pub const RET_TRAP: u32 = 0x0003_0000;
pub const RET_ERRNO: u32 = 0x0005_0000;
pub const RET_USER_NOTIF: u32 = 0x7fc0_0000;
pub const RET_TRACE: u32 = 0x7ff0_0000;
pub const RET_LOG: u32 = 0x7ffc_0000;
pub const RET_ALLOW: u32 = 0x7fff_0000;
pub const RET_ACTION_FULL: u32 = 0xffff_0000;
pub const RET_DATA: u32 = 0x0000_ffff;

/// The mismatch action of every chained filter, rewritten into a jump. TRACE never
/// reaches a program (profiles' SCMP_ACT_TRACE is lowered to ENOSYS), so the
/// value cannot collide with a real action.
const SENTINEL_DATA: u32 = 0xfeed;
const SENTINEL: u32 = RET_TRACE | SENTINEL_DATA;

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(
        "seccomp profile {origin}: compiles to {len} BPF instructions, over the kernel's limit of {MAX_INSNS}; \
         merge entries with the same action or drop argument rules"
    )]
    TooLarge { origin: String, len: usize },
    #[error("seccomp profile {origin}: the argument rules of {syscall}: {message}")]
    Backend { origin: String, syscall: String, message: String },
}

pub const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

/// The kernel's return value for an action.
pub fn ret_value(a: Act) -> u32 {
    match a {
        Act::Allow => RET_ALLOW,
        Act::Errno(e) => RET_ERRNO | e as u32,
        Act::KillThread => RET_KILL_THREAD,
        Act::KillProcess => RET_KILL_PROCESS,
        Act::Trap => RET_TRAP,
        Act::Log => RET_LOG,
    }
}

fn backend_action(a: Act) -> SeccompAction {
    match a {
        Act::Allow => SeccompAction::Allow,
        Act::Errno(e) => SeccompAction::Errno(e as u32),
        Act::KillThread => SeccompAction::KillThread,
        Act::KillProcess => SeccompAction::KillProcess,
        Act::Trap => SeccompAction::Trap,
        Act::Log => SeccompAction::Log,
    }
}

fn backend_cond(c: &Cond) -> Result<SeccompCondition, seccompiler::BackendError> {
    let op = match c.op {
        Op::Ne => SeccompCmpOp::Ne,
        Op::Lt => SeccompCmpOp::Lt,
        Op::Le => SeccompCmpOp::Le,
        Op::Eq => SeccompCmpOp::Eq,
        Op::Ge => SeccompCmpOp::Ge,
        Op::Gt => SeccompCmpOp::Gt,
        Op::MaskedEq(m) => SeccompCmpOp::MaskedEq(m),
    };
    let len = if c.dword { SeccompCmpArgLen::Dword } else { SeccompCmpArgLen::Qword };
    SeccompCondition::new(c.index, len, op, c.value)
}

/// The foreign-ABI prologue (see the module comment).
fn prologue() -> Vec<SockFilter> {
    vec![
        insn(BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        insn(BPF_JMP_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        insn(BPF_RET_K, 0, 0, RET_KILL_PROCESS),
        insn(BPF_LD_W_ABS, 0, 0, OFFSET_NR),
        insn(BPF_JMP_JSET_K, 0, 2, X32_SYSCALL_BIT),
        insn(BPF_JMP_JEQ_K, 1, 0, u32::MAX),
        insn(BPF_RET_K, 0, 0, RET_KILL_PROCESS),
    ]
}

/// One step of a syscall's decision: `action` when any of `rules` holds
/// (always when empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub rules: Vec<Vec<Cond>>,
    pub action: Act,
    /// No entry decided: the profile's default action.
    pub by_default: bool,
}

/// Per x86_64 syscall number, the steps in evaluation order (first match
/// wins); the last step is unconditional.
pub fn decisions(policy: &Policy) -> BTreeMap<u32, Vec<Step>> {
    let mut out = BTreeMap::new();
    for (nr, _) in super::syscalls::X86_64 {
        let mut steps = Vec::new();
        for e in policy.entries.iter().filter(|e| e.syscalls.contains(nr)) {
            steps.push(Step { rules: e.rules.clone(), action: e.action, by_default: false });
            if e.rules.is_empty() {
                break;
            }
        }
        if steps.last().is_none_or(|s| !s.rules.is_empty()) {
            steps.push(Step { rules: Vec::new(), action: policy.default, by_default: true });
        }
        out.insert(*nr, steps);
    }
    out
}

/// A run of conditional steps with one action: it applies when any rule
/// (an AND of conditions) holds.
type Group<'a> = (Act, Vec<&'a Vec<Cond>>);

/// Conditional steps grouped into runs of one action, without the trailing
/// runs that only restate the final action (they change nothing).
fn conditional_groups(steps: &[Step]) -> (Vec<Group<'_>>, Act) {
    let (last, conditional) = steps.split_last().expect("a decision ends in an unconditional step");
    let mut groups: Vec<Group<'_>> = Vec::new();
    for st in conditional {
        match groups.last_mut() {
            Some((a, rules)) if *a == st.action => rules.extend(st.rules.iter()),
            _ => groups.push((st.action, st.rules.iter().collect())),
        }
    }
    while groups.last().is_some_and(|(a, _)| *a == last.action) {
        groups.pop();
    }
    (groups, last.action)
}

/// What a dispatch leaf does for an interval of syscall numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leaf {
    Ret(Act),
    /// Jump to the argument-checking block of this syscall.
    Block(u32),
}

/// A binary search over `intervals` (sorted starts, the first at 0) with the
/// syscall number in A. Returns the code and, for `Leaf::Block`, the
/// (instruction index, syscall) of each jump left to patch.
fn dispatch(intervals: &[(u32, Leaf)]) -> (Vec<SockFilter>, Vec<(usize, u32)>) {
    if let [(_, leaf)] = intervals {
        return match leaf {
            Leaf::Ret(a) => (vec![insn(BPF_RET_K, 0, 0, ret_value(*a))], Vec::new()),
            Leaf::Block(nr) => (vec![insn(BPF_JMP_JA, 0, 0, 0)], vec![(0, *nr)]),
        };
    }
    let mid = intervals.len() / 2;
    let (left, left_fix) = dispatch(&intervals[..mid]);
    let (right, right_fix) = dispatch(&intervals[mid..]);
    let pivot = intervals[mid].0;
    // nr >= pivot: skip the left subtree (through a JA when it is too far
    // for an 8-bit jump offset).
    let mut code = match u8::try_from(left.len()) {
        Ok(n) => vec![insn(BPF_JMP_JGE_K, n, 0, pivot)],
        Err(_) => vec![insn(BPF_JMP_JGE_K, 0, 1, pivot), insn(BPF_JMP_JA, 0, 0, left.len() as u32)],
    };
    let base = code.len();
    let mut fix: Vec<(usize, u32)> = left_fix.into_iter().map(|(i, nr)| (i + base, nr)).collect();
    code.extend(left);
    let base = code.len();
    fix.extend(right_fix.into_iter().map(|(i, nr)| (i + base, nr)));
    code.extend(right);
    (code, fix)
}

/// The block of one syscall whose action depends on its arguments: a chain
/// of seccompiler filters (see the module comment), then `ret otherwise`.
fn block(
    origin: &str,
    nr: u32,
    groups: &[(Act, Vec<&Vec<Cond>>)],
    otherwise: Act,
) -> Result<Vec<SockFilter>, CompileError> {
    let err = |e: seccompiler::BackendError| CompileError::Backend {
        origin: origin.to_string(),
        syscall: super::syscalls::X86_64
            .iter()
            .find(|(n, _)| *n == nr)
            .map_or_else(|| format!("syscall {nr}"), |(_, name)| name.to_string()),
        message: e.to_string(),
    };
    let mut code = Vec::new();
    for (action, rules) in groups {
        let rules = rules
            .iter()
            .map(|r| SeccompRule::new(r.iter().map(backend_cond).collect::<Result<Vec<_>, _>>()?))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        let filter = SeccompFilter::new(
            BTreeMap::from([(nr as i64, rules)]),
            SeccompAction::Trace(SENTINEL_DATA),
            backend_action(*action),
            TargetArch::x86_64,
        )
        .map_err(err)?;
        let bpf: BpfProgram = filter.try_into().map_err(err)?;
        let len = bpf.len();
        for (i, f) in bpf.into_iter().enumerate() {
            code.push(if f.code == BPF_RET_K && f.k == SENTINEL {
                // To the first instruction after this filter.
                insn(BPF_JMP_JA, 0, 0, (len - i - 1) as u32)
            } else {
                insn(f.code, f.jt, f.jf, f.k)
            });
        }
    }
    code.push(insn(BPF_RET_K, 0, 0, ret_value(otherwise)));
    Ok(code)
}

/// Compiles a lowered profile into one classic BPF program.
pub fn compile(origin: &str, policy: &Policy) -> Result<Vec<SockFilter>, CompileError> {
    let mut intervals: Vec<(u32, Leaf)> = Vec::new();
    let mut blocks: Vec<(u32, Vec<SockFilter>)> = Vec::new();
    let mut next = 0u32;
    let push = |intervals: &mut Vec<(u32, Leaf)>, lo: u32, leaf: Leaf| match intervals.last() {
        Some((_, l)) if *l == leaf && matches!(leaf, Leaf::Ret(_)) => {}
        _ => intervals.push((lo, leaf)),
    };
    for (nr, steps) in decisions(policy) {
        if nr > next {
            push(&mut intervals, next, Leaf::Ret(policy.default));
        }
        let (groups, otherwise) = conditional_groups(&steps);
        if groups.is_empty() {
            push(&mut intervals, nr, Leaf::Ret(otherwise));
        } else {
            push(&mut intervals, nr, Leaf::Block(nr));
            blocks.push((nr, block(origin, nr, &groups, otherwise)?));
        }
        next = nr + 1;
    }
    // Numbers past the table (and -1) get the default action.
    push(&mut intervals, next, Leaf::Ret(policy.default));

    let mut program = prologue();
    let (tree, fixups) = dispatch(&intervals);
    let tree_at = program.len();
    program.extend(tree);
    let mut block_at = BTreeMap::new();
    for (nr, code) in blocks {
        block_at.insert(nr, program.len());
        program.extend(code);
    }
    for (i, nr) in fixups {
        let at = tree_at + i;
        program[at].k = (block_at[&nr] - at - 1) as u32;
    }
    if program.len() > MAX_INSNS {
        return Err(CompileError::TooLarge { origin: origin.to_string(), len: program.len() });
    }
    Ok(program)
}

/// The same program with every errno return turned into a user
/// notification, for explain mode: the supervisor answers each one with the
/// errno the original program returns for that very syscall, so what the
/// command sees is unchanged.
pub fn notify_variant(program: &[SockFilter]) -> Vec<SockFilter> {
    program
        .iter()
        .map(|f| {
            if f.code == BPF_RET_K && f.k & RET_ACTION_FULL == RET_ERRNO {
                insn(BPF_RET_K, 0, 0, RET_USER_NOTIF)
            } else {
                *f
            }
        })
        .collect()
}
