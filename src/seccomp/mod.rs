//! Seccomp: OCI/Docker-format profiles, compiled to classic BPF before the
//! sandbox exists, loaded as the command's last step before execve.
//!
//! - `profile`: the JSON format and its lowering to a `Policy` (x86_64).
//! - `compile`: `Policy` -> BPF with seccompiler, plus what it cannot say.
//! - shipped profiles (`seccomp/*.json`) are compiled by build.rs into
//!   static arrays: a run copies nothing and compiles nothing.
//! - `cache`: user profiles, compiled once per content hash under the store.
//! - `notify` + `eval`: explain mode (`--seccomp-report`), where the
//!   supervisor answers each denial itself and counts it by name.
//! - `explain`: what a profile allows and denies, for `husk seccomp check`.
//! - `needs`: the syscalls husk itself makes under the filter, before
//!   execve, that every profile must allow.

pub mod cache;
pub mod compile;
pub mod eval;
pub mod explain;
pub mod needs;
pub mod notify;
pub mod profile;
pub mod report;
pub mod syscalls;

pub use report::SeccompReport;

/// What both shipped profiles deny with EPERM: the contract their unit
/// tests check against the compiled programs and tests/seccomp.rs checks
/// against the kernel, from inside a sandbox.
pub const DENIED_EPERM: &[&str] = &[
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
    "open_by_handle_at",
];

use crate::spec::SeccompSpec;
use crate::step::{AtStep, Step, StepError};
use crate::sync::{Channel, Msg};
use compile::{CompileError, SockFilter, insn};
use profile::ProfileError;
use sha2::Digest;
use std::borrow::Cow;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// A profile shipped with husk, compiled at build time.
pub struct Shipped {
    pub name: &'static str,
    pub json: &'static str,
    pub sha256: &'static str,
    pub flags: u32,
    pub default_action: &'static str,
    pub filter: &'static [SockFilter],
}

include!(concat!(env!("OUT_DIR"), "/shipped_seccomp.rs"));

pub fn shipped(name: &str) -> Option<&'static Shipped> {
    SHIPPED.iter().find(|s| s.name == name)
}

pub fn shipped_names() -> Vec<&'static str> {
    SHIPPED.iter().map(|s| s.name).collect()
}

/// Largest profile file husk reads (Docker's own is ~20 KiB).
pub const MAX_PROFILE_BYTES: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("--seccomp {path}: {error}; give an OCI/Docker profile file or one of: default, strict, unconfined")]
    Read { path: PathBuf, error: std::io::Error },
    #[error(transparent)]
    File(crate::userfile::UserFileError),
    #[error("--seccomp {path}: the profile is not UTF-8 JSON")]
    NotUtf8 { path: PathBuf },
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error("--seccomp-report needs a filter: with --seccomp unconfined there is nothing to report")]
    ReportUnconfined,
    #[error(
        "--seccomp {name}: the profile does not allow {}, which husk itself calls under the filter before the \
         command starts ({}); allow them (e.g. add them to a rule with \"action\": \"SCMP_ACT_ALLOW\")",
        missing.join(", "), needs::explain(missing)
    )]
    MissesHuskNeeds { name: String, missing: Vec<&'static str> },
    #[error(
        "--seccomp-report: profile {name} does not allow sendmsg, which husk needs to carry the notification fd \
         out of the sandbox; allow sendmsg or drop --seccomp-report"
    )]
    ReportNeedsSendmsg { name: String },
}

/// `--seccomp VALUE`: a shipped name, `unconfined`, or a path.
pub fn parse_arg(value: &str) -> Result<SeccompSpec, UnknownProfile> {
    match value {
        "unconfined" => Ok(SeccompSpec::Unconfined),
        v if shipped(v).is_some() => Ok(SeccompSpec::Named(v.to_string())),
        v if v.contains('/') || v.ends_with(".json") || Path::new(v).exists() => Ok(SeccompSpec::File(v.into())),
        v => Err(UnknownProfile(v.to_string())),
    }
}

/// A `--seccomp` value that names neither a shipped profile nor a file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--seccomp {0:?}: no shipped profile by that name ({names}), and no such file; give a path like ./{0}",
    names = shipped_names().join(", ")
)]
pub struct UnknownProfile(pub String);

/// Where the program came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Shipped,
    File(PathBuf),
}

/// A compiled profile, ready to load: built at plan time, before clone.
#[derive(Debug)]
pub struct Program {
    pub name: String,
    pub source: Source,
    /// sha256 of the profile's JSON bytes.
    pub sha256: String,
    /// The enforcing program.
    pub filter: Cow<'static, [SockFilter]>,
    /// Explain mode: the same program with errno returns turned into user
    /// notifications; installed instead of `filter`.
    pub notify: Option<Vec<SockFilter>>,
    /// SECCOMP_FILTER_FLAG_* from the profile.
    pub flags: u32,
    pub default_action: String,
    pub ignored_names: Vec<String>,
    pub foreign_arches: Vec<String>,
    /// builtin | hit | miss | uncached
    pub cache: &'static str,
}

impl Program {
    /// The profile as OCI JSON, for backends that apply it themselves
    /// (runsc's --oci-seccomp). `None` if a profile file vanished since it
    /// was compiled.
    pub fn profile_json(&self) -> Option<serde_json::Value> {
        let text = match &self.source {
            Source::Shipped => shipped(&self.name)?.json.to_string(),
            Source::File(path) => crate::userfile::read_text("--seccomp", path, MAX_PROFILE_BYTES).ok()?,
        };
        serde_json::from_str(&text).ok()
    }

    fn from_shipped(s: &'static Shipped) -> Program {
        Program {
            name: s.name.to_string(),
            source: Source::Shipped,
            sha256: s.sha256.to_string(),
            filter: Cow::Borrowed(s.filter),
            notify: None,
            flags: s.flags,
            default_action: s.default_action.to_string(),
            ignored_names: Vec::new(),
            foreign_arches: Vec::new(),
            cache: "builtin",
        }
    }

    /// The program in the cache's file format, for a long-lived sandbox:
    /// every `husk exec` loads exactly the filter the sandbox was created
    /// with, whatever happened to the profile file since.
    pub fn to_bytes(&self) -> Vec<u8> {
        cache::encode(&cache::Compiled {
            filter: self.filter.to_vec(),
            flags: self.flags,
            default_action: self.default_action.clone(),
            ignored_names: self.ignored_names.clone(),
            foreign_arches: self.foreign_arches.clone(),
        })
    }

    /// A program saved by `to_bytes` (`None` if the bytes do not decode).
    /// `report` re-derives the explain-mode variant.
    pub fn from_bytes(name: &str, shipped: bool, sha256: &str, report: bool, bytes: &[u8]) -> Option<Program> {
        let c = cache::decode(bytes)?;
        let notify = report.then(|| compile::notify_variant(&c.filter));
        Some(Program {
            name: name.to_string(),
            source: if shipped { Source::Shipped } else { Source::File(name.into()) },
            sha256: sha256.to_string(),
            filter: Cow::Owned(c.filter),
            notify,
            flags: c.flags,
            default_action: c.default_action,
            ignored_names: c.ignored_names,
            foreign_arches: c.foreign_arches,
            cache: "sandbox",
        })
    }

    pub fn installed(&self) -> &[SockFilter] {
        self.notify.as_deref().unwrap_or(&self.filter)
    }

    pub fn report(&self) -> bool {
        self.notify.is_some()
    }

    pub fn mode(&self) -> &'static str {
        if self.report() { "report" } else { "enforce" }
    }

    /// Child side, pid 2, after every other confinement step: load the
    /// filter and, in explain mode, hand the listener to husk before
    /// anything can be denied (a denial before husk holds the listener would
    /// block forever). Allocates nothing.
    pub fn apply(&self, chan: &Channel) -> Result<(), StepError> {
        use crate::sys::seccomp::{SECCOMP_FILTER_FLAG_NEW_LISTENER, install_filter};
        // WAIT_KILLABLE_RECV only means something with a listener; the
        // kernel refuses it without one.
        const WAIT_KILLABLE_RECV: u32 = 1 << 5;
        let flags = match self.report() {
            true => self.flags | SECCOMP_FILTER_FLAG_NEW_LISTENER,
            false => self.flags & !WAIT_KILLABLE_RECV,
        };
        let listener = install_filter(self.installed(), flags).at(Step::Seccomp)?;
        if let Some(l) = listener {
            chan.send_fd(Msg::SeccompListener, l.as_fd()).at(Step::Seccomp)?;
        }
        Ok(())
    }
}

use crate::kernel::kernel_version;

/// Builds the program for a run. `caps_keep` (bit N = capability N) feeds
/// Docker's `includes.caps`; compiled user profiles are cached under
/// `store_root/seccomp`.
pub fn plan(
    spec: &SeccompSpec,
    report: bool,
    caps_keep: u64,
    store_root: &Path,
) -> Result<Option<Program>, SeccompError> {
    let mut program = match spec {
        SeccompSpec::Unconfined if report => return Err(SeccompError::ReportUnconfined),
        SeccompSpec::Unconfined => return Ok(None),
        SeccompSpec::Named(name) => match shipped(name) {
            Some(s) => Program::from_shipped(s),
            None => {
                return Err(SeccompError::Read {
                    path: name.into(),
                    error: std::io::Error::new(std::io::ErrorKind::NotFound, "no shipped profile by that name"),
                });
            }
        },
        SeccompSpec::File(path) => from_file(path, caps_keep, store_root)?,
    };
    // Shipped profiles are checked by needs' unit test, not on every run.
    if program.source != Source::Shipped {
        let missing = needs::missing(&program.filter);
        if !missing.is_empty() {
            return Err(SeccompError::MissesHuskNeeds { name: program.name, missing });
        }
    }
    if report {
        let sendmsg = eval::Data::syscall(libc::SYS_sendmsg as i32, &[]);
        if eval::run(&program.filter, &sendmsg) != compile::RET_ALLOW {
            return Err(SeccompError::ReportNeedsSendmsg { name: program.name });
        }
        program.notify = Some(compile::notify_variant(&program.filter));
    }
    Ok(Some(program))
}

/// Reads, hashes and (on a cache miss) compiles a user profile.
pub fn from_file(path: &Path, caps_keep: u64, store_root: &Path) -> Result<Program, SeccompError> {
    use crate::userfile::UserFileError;
    let bytes = crate::userfile::read("--seccomp", path, MAX_PROFILE_BYTES).map_err(|e| match e {
        UserFileError::Io { path, source, .. } => SeccompError::Read { path, error: source },
        e => SeccompError::File(e),
    })?;
    let sha256 = hex::encode(sha2::Sha256::digest(&bytes));
    let kernel = kernel_version();
    let cache = cache::Cache::new(store_root);
    let key = cache::key(&bytes, caps_keep, kernel);
    let name = path.display().to_string();
    let mk = |c: cache::Compiled, state: &'static str| Program {
        name: name.clone(),
        source: Source::File(path.to_path_buf()),
        sha256: sha256.clone(),
        filter: Cow::Owned(c.filter),
        notify: None,
        flags: c.flags,
        default_action: c.default_action,
        ignored_names: c.ignored_names,
        foreign_arches: c.foreign_arches,
        cache: state,
    };
    // A cached program is installed as is: only a store root that is ours
    // and private (as the image store requires) may supply one, or anyone
    // who can write there could plant an allow-all filter.
    let trusted = crate::paths::ensure_private_dir("store root", store_root).is_ok();
    if trusted && let Some(c) = cache.load(&key) {
        return Ok(mk(c, "hit"));
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| SeccompError::NotUtf8 { path: path.to_path_buf() })?;
    let compiled = compile_text(&name, text, caps_keep, kernel)?;
    let state = if trusted && cache.store(&key, &compiled).is_ok() { "miss" } else { "uncached" };
    Ok(mk(compiled, state))
}

/// Parses, lowers and compiles profile text.
pub fn compile_text(
    origin: &str,
    text: &str,
    caps_keep: u64,
    kernel: Option<(u32, u32)>,
) -> Result<cache::Compiled, SeccompError> {
    let raw = profile::parse(origin, text)?;
    let has_cap = |name: &str| crate::capability::parse(name).map(|c| caps_keep & (1u64 << c) != 0);
    let policy = raw.lower(origin, &profile::Context { has_cap: &has_cap, kernel })?;
    let filter = compile::compile(origin, &policy)?;
    Ok(cache::Compiled {
        filter,
        flags: policy.flags,
        default_action: policy.default.to_string(),
        ignored_names: policy.ignored_names,
        foreign_arches: policy.foreign_arches,
    })
}

/// x86_64 syscall name for a number (`syscall_N` when unknown).
pub fn syscall_name(nr: i64) -> String {
    syscalls::X86_64
        .binary_search_by_key(&nr, |(n, _)| *n as i64)
        .map(|i| syscalls::X86_64[i].1.to_string())
        .unwrap_or_else(|_| format!("syscall_{nr}"))
}

#[cfg(test)]
mod tests;
