//! The OCI / Docker seccomp profile format, and its lowering into a
//! `Policy`: syscall numbers, resolved actions and argument conditions for
//! this architecture.
//!
//! Accepted: the runtime-spec's `linux.seccomp` object (`defaultAction`,
//! `defaultErrnoRet`, `architectures`, `flags`, `syscalls[]` with `names`,
//! `action`, `errnoRet`, `args[]`) and Docker's/Podman's superset
//! (`archMap`, `includes`/`excludes` with `arches`, `caps`, `minKernel`,
//! `comment`, the legacy `name`, `errno` and `defaultErrno`). Unknown keys
//! are errors: a misspelt `defaultAction` must not silently fall back.
//!
//! This file is also compiled by build.rs (shipped profiles become BPF at
//! build time), so it only uses `super::syscalls` and plain crates.

use serde::Deserialize;
use std::collections::HashMap;

/// Errno numbers by name, for `errno`/`defaultErrno` strings and for
/// printing actions.
pub const ERRNO_NAMES: &[(&str, u16)] = &[
    ("EPERM", 1),
    ("ENOENT", 2),
    ("ESRCH", 3),
    ("EINTR", 4),
    ("EIO", 5),
    ("ENXIO", 6),
    ("E2BIG", 7),
    ("ENOEXEC", 8),
    ("EBADF", 9),
    ("ECHILD", 10),
    ("EAGAIN", 11),
    ("ENOMEM", 12),
    ("EACCES", 13),
    ("EFAULT", 14),
    ("EBUSY", 16),
    ("EEXIST", 17),
    ("EXDEV", 18),
    ("ENODEV", 19),
    ("ENOTDIR", 20),
    ("EISDIR", 21),
    ("EINVAL", 22),
    ("ENFILE", 23),
    ("EMFILE", 24),
    ("ENOTTY", 25),
    ("ETXTBSY", 26),
    ("EFBIG", 27),
    ("ENOSPC", 28),
    ("ESPIPE", 29),
    ("EROFS", 30),
    ("EMLINK", 31),
    ("EPIPE", 32),
    ("ERANGE", 34),
    ("ENOSYS", 38),
    ("ENOTSOCK", 88),
    ("EPROTONOSUPPORT", 93),
    ("EOPNOTSUPP", 95),
    ("EAFNOSUPPORT", 97),
    ("EADDRNOTAVAIL", 99),
    ("ENETUNREACH", 101),
    ("ECONNREFUSED", 111),
    ("EDQUOT", 122),
];

pub fn errno_name(n: u16) -> String {
    ERRNO_NAMES.iter().find(|(_, v)| *v == n).map(|(k, _)| k.to_string()).unwrap_or_else(|| format!("errno {n}"))
}

/// The kernel clamps larger values; an errno beyond MAX_ERRNO would read
/// as a valid return value in userspace.
pub const MAX_ERRNO: u32 = 4095;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("seccomp profile {origin}: {path}: {message}")]
    Field { origin: String, path: String, message: String },
    #[error("seccomp profile {origin}: {at}: {why} (got {value})")]
    Invalid { origin: String, at: String, value: String, why: String },
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawAction {
    #[serde(rename = "SCMP_ACT_ALLOW")]
    Allow,
    #[serde(rename = "SCMP_ACT_ERRNO")]
    Errno,
    #[serde(rename = "SCMP_ACT_KILL")]
    Kill,
    #[serde(rename = "SCMP_ACT_KILL_THREAD")]
    KillThread,
    #[serde(rename = "SCMP_ACT_KILL_PROCESS")]
    KillProcess,
    #[serde(rename = "SCMP_ACT_TRAP")]
    Trap,
    #[serde(rename = "SCMP_ACT_TRACE")]
    Trace,
    #[serde(rename = "SCMP_ACT_LOG")]
    Log,
    #[serde(rename = "SCMP_ACT_NOTIFY")]
    Notify,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawOp {
    #[serde(rename = "SCMP_CMP_NE")]
    Ne,
    #[serde(rename = "SCMP_CMP_LT")]
    Lt,
    #[serde(rename = "SCMP_CMP_LE")]
    Le,
    #[serde(rename = "SCMP_CMP_EQ")]
    Eq,
    #[serde(rename = "SCMP_CMP_GE")]
    Ge,
    #[serde(rename = "SCMP_CMP_GT")]
    Gt,
    #[serde(rename = "SCMP_CMP_MASKED_EQ")]
    MaskedEq,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawProfile {
    pub default_action: RawAction,
    pub default_errno_ret: Option<u32>,
    /// Legacy (Podman): the default errno by name.
    pub default_errno: Option<String>,
    #[serde(default)]
    pub architectures: Option<Vec<String>>,
    #[serde(default)]
    pub arch_map: Option<Vec<RawArchMap>>,
    #[serde(default)]
    pub flags: Option<Vec<String>>,
    pub listener_path: Option<String>,
    pub listener_metadata: Option<String>,
    #[serde(default)]
    pub syscalls: Option<Vec<RawSyscall>>,
    /// husk extension: a free-text description (ignored).
    pub comment: Option<String>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawArchMap {
    pub architecture: String,
    #[serde(default)]
    pub sub_architectures: Option<Vec<String>>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawSyscall {
    #[serde(default)]
    pub names: Option<Vec<String>>,
    /// Legacy Docker format: one name per entry.
    pub name: Option<String>,
    pub action: RawAction,
    pub errno_ret: Option<u32>,
    /// Legacy (Podman): the errno by name.
    pub errno: Option<String>,
    #[serde(default)]
    pub args: Option<Vec<RawArg>>,
    pub comment: Option<String>,
    #[serde(default)]
    pub includes: Option<RawFilter>,
    #[serde(default)]
    pub excludes: Option<RawFilter>,
}

#[derive(Deserialize, Debug, Clone, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawFilter {
    #[serde(default)]
    pub arches: Option<Vec<String>>,
    #[serde(default)]
    pub caps: Option<Vec<String>>,
    pub min_kernel: Option<String>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawArg {
    pub index: u32,
    pub value: u64,
    #[serde(default)]
    pub value_two: u64,
    pub op: RawOp,
}

/// What the filter does with a syscall, errnos resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Act {
    Allow,
    Errno(u16),
    KillThread,
    KillProcess,
    Trap,
    Log,
}

impl std::fmt::Display for Act {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Act::Allow => f.write_str("allow"),
            Act::Errno(e) => write!(f, "errno {}", errno_name(*e)),
            Act::KillThread => f.write_str("kill thread"),
            Act::KillProcess => f.write_str("kill process"),
            Act::Trap => f.write_str("trap (SIGSYS)"),
            Act::Log => f.write_str("log and allow"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Ne,
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
    /// `(arg & mask) == value`.
    MaskedEq(u64),
}

/// One argument comparison. `dword`: the kernel reads this argument as a
/// 32-bit value, so only the low half is compared (see `DWORD_ARGS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cond {
    pub index: u8,
    pub op: Op,
    pub value: u64,
    pub dword: bool,
}

impl std::fmt::Display for Cond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = format!("arg{}", self.index);
        match self.op {
            Op::MaskedEq(m) => write!(f, "{a} & {m:#x} == {:#x}", self.value),
            op => {
                let sym = match op {
                    Op::Ne => "!=",
                    Op::Lt => "<",
                    Op::Le => "<=",
                    Op::Eq => "==",
                    Op::Ge => ">=",
                    _ => ">",
                };
                write!(f, "{a} {sym} {:#x}", self.value)
            }
        }
    }
}

/// One `syscalls[]` entry after lowering: it matches a syscall in
/// `syscalls` when any of `rules` (each an AND of conditions) holds, or
/// always when `rules` is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub at: usize,
    pub action: Act,
    pub syscalls: Vec<u32>,
    pub rules: Vec<Vec<Cond>>,
}

/// A profile lowered for x86_64. Entries are tried in file order; the first
/// one that matches a syscall decides, else `default`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub default: Act,
    pub entries: Vec<Entry>,
    /// Names that are not x86_64 system calls (other architectures' calls
    /// in multi-arch profiles); they match nothing.
    pub ignored_names: Vec<String>,
    /// `architectures` other than x86_64: husk never lets a foreign ABI
    /// through, whatever the profile lists.
    pub foreign_arches: Vec<String>,
    /// SECCOMP_FILTER_FLAG_* bits to install with.
    pub flags: u32,
}

/// What lowering needs to know about the run: capabilities the command
/// keeps (Docker's `includes.caps`) and the running kernel (`minKernel`).
pub struct Context<'a> {
    /// Some(true) when the command keeps the capability, None when the
    /// name is not a capability.
    pub has_cap: &'a dyn Fn(&str) -> Option<bool>,
    pub kernel: Option<(u32, u32)>,
}

/// Arguments the kernel reads as 32-bit values although they arrive in a
/// 64-bit register: the comparison must see what the kernel sees, or
/// `ioctl(fd, TIOCSTI | 1 << 32)` would slip past an `== TIOCSTI` deny
/// rule and still reach the TIOCSTI handler.
pub const DWORD_ARGS: &[(&str, u8)] = &[
    ("clone", 0),
    ("ioctl", 1),
    ("fcntl", 1),
    ("personality", 0),
    ("prctl", 0),
    ("setns", 1),
    ("socket", 0),
    ("socket", 1),
    ("socket", 2),
    ("socketpair", 0),
    ("socketpair", 1),
    ("socketpair", 2),
];

pub const ARCHES: &[&str] = &[
    "SCMP_ARCH_NATIVE",
    "SCMP_ARCH_X86",
    "SCMP_ARCH_X86_64",
    "SCMP_ARCH_X32",
    "SCMP_ARCH_ARM",
    "SCMP_ARCH_AARCH64",
    "SCMP_ARCH_MIPS",
    "SCMP_ARCH_MIPS64",
    "SCMP_ARCH_MIPS64N32",
    "SCMP_ARCH_MIPSEL",
    "SCMP_ARCH_MIPSEL64",
    "SCMP_ARCH_MIPSEL64N32",
    "SCMP_ARCH_PPC",
    "SCMP_ARCH_PPC64",
    "SCMP_ARCH_PPC64LE",
    "SCMP_ARCH_S390",
    "SCMP_ARCH_S390X",
    "SCMP_ARCH_PARISC",
    "SCMP_ARCH_PARISC64",
    "SCMP_ARCH_RISCV64",
    "SCMP_ARCH_LOONGARCH64",
    "SCMP_ARCH_M68K",
    "SCMP_ARCH_SH",
    "SCMP_ARCH_SHEB",
];

/// Docker's `includes.arches` names (Go's GOARCH spelling) meaning this host.
const NATIVE_GOARCH: &[&str] = &["amd64", "x86_64"];

pub const FLAGS: &[(&str, u32)] = &[
    ("SECCOMP_FILTER_FLAG_TSYNC", 0),
    ("SECCOMP_FILTER_FLAG_LOG", 1 << 1),
    ("SECCOMP_FILTER_FLAG_SPEC_ALLOW", 1 << 2),
    ("SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV", 1 << 5),
];

/// Parses profile JSON, naming the offending field on error.
pub fn parse(origin: &str, text: &str) -> Result<RawProfile, ProfileError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let raw: RawProfile = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let path = if path == "." { "(top level)".to_string() } else { path };
        ProfileError::Field { origin: origin.to_string(), path, message: inner.to_string() }
    })?;
    Ok(raw)
}

fn errno_by_name(name: &str) -> Option<u16> {
    ERRNO_NAMES.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
}

fn parse_kernel(v: &str) -> Option<(u32, u32)> {
    let mut it = v.trim().split('.');
    Some((it.next()?.parse().ok()?, it.next().unwrap_or("0").parse().ok()?))
}

/// Syscall name -> number for x86_64.
pub fn syscall_numbers() -> HashMap<&'static str, u32> {
    super::syscalls::X86_64.iter().map(|(nr, name)| (*name, *nr)).collect()
}

impl RawProfile {
    /// Validates every value and lowers the profile for x86_64.
    pub fn lower(&self, origin: &str, ctx: &Context<'_>) -> Result<Policy, ProfileError> {
        let bad = |at: String, value: String, why: &str| ProfileError::Invalid {
            origin: origin.to_string(),
            at,
            value,
            why: why.to_string(),
        };
        let resolve = |at: &str, action: RawAction, ret: Option<u32>, name: &Option<String>| -> Result<Act, _> {
            let errno = match (ret, name) {
                (Some(n), _) if n > MAX_ERRNO => {
                    return Err(bad(format!("{at}errnoRet"), n.to_string(), "an errno must be 0..=4095"));
                }
                (Some(n), _) => Some(n as u16),
                (None, Some(s)) => Some(errno_by_name(s).ok_or_else(|| {
                    bad(format!("{at}errno"), format!("{s:?}"), "unknown errno name (use errnoRet with the number)")
                })?),
                (None, None) => None,
            };
            Ok(match action {
                RawAction::Allow => Act::Allow,
                // runc and crun default an errno action without a value to EPERM.
                RawAction::Errno => Act::Errno(errno.unwrap_or(1)),
                RawAction::Kill | RawAction::KillThread => Act::KillThread,
                RawAction::KillProcess => Act::KillProcess,
                RawAction::Trap => Act::Trap,
                RawAction::Log => Act::Log,
                // With no tracer attached the kernel fails a TRACE'd syscall
                // with ENOSYS; husk never attaches one, so say so directly.
                RawAction::Trace => Act::Errno(38),
                RawAction::Notify => {
                    return Err(bad(
                        format!("{at}action"),
                        "\"SCMP_ACT_NOTIFY\"".into(),
                        "needs an external seccomp agent (listenerPath), which husk does not run; \
                         use --seccomp-report to have husk answer denials itself",
                    ));
                }
            })
        };

        let default = resolve("", self.default_action, self.default_errno_ret, &self.default_errno)?;
        if self.listener_path.as_deref().is_some_and(|p| !p.is_empty()) {
            return Err(bad(
                "listenerPath".into(),
                format!("{:?}", self.listener_path.as_deref().unwrap_or_default()),
                "seccomp agents are not supported",
            ));
        }

        let mut foreign_arches = Vec::new();
        let mut arch_names: Vec<(String, &String)> = Vec::new();
        for (i, a) in self.architectures.iter().flatten().enumerate() {
            arch_names.push((format!("architectures[{i}]"), a));
        }
        for (i, m) in self.arch_map.iter().flatten().enumerate() {
            arch_names.push((format!("archMap[{i}].architecture"), &m.architecture));
            for (j, s) in m.sub_architectures.iter().flatten().enumerate() {
                arch_names.push((format!("archMap[{i}].subArchitectures[{j}]"), s));
            }
        }
        for (at, a) in arch_names {
            if !ARCHES.contains(&a.as_str()) {
                return Err(bad(at, format!("{a:?}"), "unknown architecture (e.g. SCMP_ARCH_X86_64)"));
            }
            if a != "SCMP_ARCH_X86_64" && a != "SCMP_ARCH_NATIVE" && !foreign_arches.contains(a) {
                foreign_arches.push(a.clone());
            }
        }

        let mut flags = 0u32;
        for (i, f) in self.flags.iter().flatten().enumerate() {
            let bit = FLAGS.iter().find(|(n, _)| n == f).ok_or_else(|| {
                bad(
                    format!("flags[{i}]"),
                    format!("{f:?}"),
                    "unknown flag (SECCOMP_FILTER_FLAG_LOG, _SPEC_ALLOW, _WAIT_KILLABLE_RECV, _TSYNC)",
                )
            })?;
            flags |= bit.1;
        }

        let numbers = syscall_numbers();
        let mut ignored_names: Vec<String> = Vec::new();
        let mut entries = Vec::new();
        for (i, sc) in self.syscalls.iter().flatten().enumerate() {
            let at = format!("syscalls[{i}].");
            let action = resolve(&at, sc.action, sc.errno_ret, &sc.errno)?;
            if !self.applies(&at, sc, ctx, &bad)? {
                continue;
            }
            let names: Vec<&String> = sc.names.iter().flatten().chain(sc.name.iter()).collect();
            if names.is_empty() {
                return Err(bad(format!("{at}names"), "[]".into(), "an entry needs at least one syscall name"));
            }
            let mut syscalls = Vec::new();
            for (j, name) in names.iter().enumerate() {
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
                    return Err(bad(format!("{at}names[{j}]"), format!("{name:?}"), "not a syscall name"));
                }
                match numbers.get(name.as_str()) {
                    Some(nr) => syscalls.push(*nr),
                    None if !ignored_names.contains(name) => ignored_names.push(name.to_string()),
                    None => {}
                }
            }
            let mut conds = Vec::new();
            for (j, a) in sc.args.iter().flatten().enumerate() {
                let at = format!("{at}args[{j}]");
                if a.index > 5 {
                    return Err(bad(format!("{at}.index"), a.index.to_string(), "syscalls have arguments 0..=5"));
                }
                let index = a.index as u8;
                let dword = names
                    .iter()
                    .filter(|n| numbers.contains_key(n.as_str()))
                    .all(|n| DWORD_ARGS.contains(&(n.as_str(), index)));
                let narrow = |v: u64, field: &str| -> Result<u64, ProfileError> {
                    if !dword || v >> 32 == 0 {
                        Ok(v)
                    } else if v >> 32 == 0xffff_ffff && v & 0x8000_0000 != 0 {
                        // A sign-extended negative int.
                        Ok(v & 0xffff_ffff)
                    } else {
                        Err(bad(
                            format!("{at}.{field}"),
                            format!("{v:#x}"),
                            "the kernel reads this argument as 32 bits, so a value above 32 bits can never match",
                        ))
                    }
                };
                let (op, value) = match a.op {
                    RawOp::Ne => (Op::Ne, narrow(a.value, "value")?),
                    RawOp::Lt => (Op::Lt, narrow(a.value, "value")?),
                    RawOp::Le => (Op::Le, narrow(a.value, "value")?),
                    RawOp::Eq => (Op::Eq, narrow(a.value, "value")?),
                    RawOp::Ge => (Op::Ge, narrow(a.value, "value")?),
                    RawOp::Gt => (Op::Gt, narrow(a.value, "value")?),
                    // OCI: `value` is the mask, `valueTwo` the expected bits.
                    RawOp::MaskedEq => {
                        let mask = if dword { a.value & 0xffff_ffff } else { a.value };
                        (Op::MaskedEq(mask), narrow(a.value_two, "valueTwo")? & mask)
                    }
                };
                conds.push(Cond { index, op, value, dword });
            }
            // runc's rule, kept for compatibility: when one argument index
            // appears twice, every condition becomes its own rule (OR);
            // otherwise all conditions must hold (AND).
            let mut seen = [0u8; 6];
            conds.iter().for_each(|c| seen[c.index as usize] += 1);
            let rules = if conds.is_empty() {
                Vec::new()
            } else if seen.iter().any(|n| *n > 1) {
                conds.into_iter().map(|c| vec![c]).collect()
            } else {
                vec![conds]
            };
            if !syscalls.is_empty() {
                entries.push(Entry { at: i, action, syscalls, rules });
            }
        }
        Ok(Policy { default, entries, ignored_names, foreign_arches, flags })
    }

    /// Docker's `includes`/`excludes`: whether the entry applies on this
    /// architecture, with these capabilities, on this kernel.
    fn applies(
        &self,
        at: &str,
        sc: &RawSyscall,
        ctx: &Context<'_>,
        bad: &dyn Fn(String, String, &str) -> ProfileError,
    ) -> Result<bool, ProfileError> {
        let cap = |field: &str, i: usize, c: &String| -> Result<bool, ProfileError> {
            (ctx.has_cap)(c).ok_or_else(|| {
                bad(format!("{at}{field}.caps[{i}]"), format!("{c:?}"), "unknown capability (e.g. CAP_SYS_ADMIN)")
            })
        };
        let kernel = |field: &str, v: &String| -> Result<bool, ProfileError> {
            let want = parse_kernel(v)
                .ok_or_else(|| bad(format!("{at}{field}.minKernel"), format!("{v:?}"), "expected MAJOR.MINOR"))?;
            Ok(ctx.kernel.is_none_or(|k| k >= want))
        };
        if let Some(inc) = &sc.includes {
            if let Some(arches) = &inc.arches
                && !arches.is_empty()
                && !arches.iter().any(|a| NATIVE_GOARCH.contains(&a.as_str()))
            {
                return Ok(false);
            }
            for (i, c) in inc.caps.iter().flatten().enumerate() {
                if !cap("includes", i, c)? {
                    return Ok(false);
                }
            }
            if let Some(v) = &inc.min_kernel
                && !kernel("includes", v)?
            {
                return Ok(false);
            }
        }
        if let Some(exc) = &sc.excludes {
            if exc.arches.iter().flatten().any(|a| NATIVE_GOARCH.contains(&a.as_str())) {
                return Ok(false);
            }
            for (i, c) in exc.caps.iter().flatten().enumerate() {
                if cap("excludes", i, c)? {
                    return Ok(false);
                }
            }
            if let Some(v) = &exc.min_kernel
                && kernel("excludes", v)?
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
