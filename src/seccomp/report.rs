//! What the verdict says about seccomp: the filter applied (the verdict's
//! `isolation.seccomp`, and a sandbox's record keeps it) and, after a run,
//! the same plus what it denied (the verdict's top-level `seccomp`).
//! Schema: `$defs/seccomp` in docs/verdict.schema.json.

use super::{Program, Source, notify, profile, syscall_name};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

const UNCONFINED_WARNING: &str =
    "no seccomp filter: the whole kernel syscall surface (mount API, keyctl, bpf, io_uring, ...) is reachable";

const REPORT_HINT: &str = "add --seccomp-report to list the syscalls the filter denied, by name";

const INHERITED_HINT: &str = "a warm call runs under its interpreter's filter, whose denials are not counted per call; \
                              run the code as a command (husk exec ID -- python3 -) with --seccomp-report to list them";

const KILLED_BY_FILTER: &str = "the command died of SIGSYS: it made a syscall the profile kills (i386 int 0x80 and x32 \
                                syscalls always are) or traps";

/// One seccomp report. The keys are one flat object in the verdict, each
/// present only where it applies (a filter's facts only with a filter; the
/// denials only after a run), so the optional ones are skipped when unset.
/// Fields stay in alphabetical order: the verdict's keys have always come
/// out sorted, and consumers that diff verdicts keep seeing the same bytes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct SeccompReport {
    /// builtin | hit | miss | uncached | sandbox
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<Cow<'static, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_action: Option<String>,
    /// After a run: denied syscall name -> count with `--seccomp-report`,
    /// `null` without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied: Option<Denied>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied_errno: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied_total: Option<u64>,
    /// runsc: who enforces the profile inside gVisor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforced_by: Option<Cow<'static, str>>,
    /// Always `kill_process` with a filter: i386 and x32 syscalls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub foreign_abi: Option<Cow<'static, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<Cow<'static, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored_arches: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored_name_count: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored_names: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub killed_by_filter: Option<Cow<'static, str>>,
    /// enforce | report | unconfined
    pub mode: Cow<'static, str>,
    /// default | strict | the profile file's path | unconfined
    pub profile: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<ProfileSource>,
    /// true only when no filter was loaded (`warning` then says so).
    pub unconfined: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<Cow<'static, str>>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ProfileSource {
    Shipped,
    File,
}

/// The verdict's `seccomp.denied`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum Denied {
    /// `--seccomp-report`: syscall name -> times denied.
    Counted(BTreeMap<String, u64>),
    /// Without it the filter denies silently: `null`.
    NotCounted,
}

impl SeccompReport {
    /// What is applied: the verdict's `isolation.seccomp`.
    pub fn applied(p: Option<&Program>) -> SeccompReport {
        match p {
            None => SeccompReport {
                mode: "unconfined".into(),
                profile: "unconfined".into(),
                unconfined: true,
                warning: Some(UNCONFINED_WARNING.into()),
                ..Default::default()
            },
            Some(p) => SeccompReport {
                cache: Some(p.cache.into()),
                default_action: Some(p.default_action.clone()),
                foreign_abi: Some("kill_process".into()),
                ignored_arches: Some(p.foreign_arches.clone()),
                ignored_name_count: Some(p.ignored_names.len()),
                ignored_names: Some(p.ignored_names.clone()),
                instructions: Some(p.installed().len()),
                mode: p.mode().into(),
                profile: p.name.clone(),
                sha256: Some(p.sha256.clone()),
                source: Some(match p.source {
                    Source::Shipped => ProfileSource::Shipped,
                    Source::File(_) => ProfileSource::File,
                }),
                unconfined: false,
                ..Default::default()
            },
        }
    }

    /// After a run (the verdict's top-level `seccomp`): the profile plus,
    /// in explain mode, the denied syscalls by name; `signal` is the one
    /// the command died of, if any.
    pub fn after_run(p: Option<&Program>, denied: &notify::Denials, signal: Option<i32>) -> SeccompReport {
        let mut r = SeccompReport::applied(p);
        let Some(p) = p else { return r };
        if p.report() {
            r.denied = Some(Denied::Counted(denied.iter().map(|(nr, d)| (syscall_name(*nr), d.count)).collect()));
            r.denied_errno =
                Some(denied.iter().map(|(nr, d)| (syscall_name(*nr), profile::errno_name(d.errno))).collect());
            r.denied_total = Some(denied.values().map(|d| d.count).sum());
        } else {
            r.denied = Some(Denied::NotCounted);
            r.hint = Some(REPORT_HINT.into());
        }
        if signal == Some(libc::SIGSYS) {
            r.killed_by_filter = Some(KILLED_BY_FILTER.into());
        }
        r
    }

    /// A warm call's filter: the one its interpreter was started under
    /// (the sandbox's), inherited by the process that runs the call. Its
    /// denials are not counted: no listener watches that process.
    pub fn inherited(p: Option<&Program>, signal: Option<i32>) -> SeccompReport {
        let mut r = SeccompReport::applied(p);
        if p.is_some() {
            r.denied = Some(Denied::NotCounted);
            r.hint = Some(INHERITED_HINT.into());
        }
        if p.is_some() && signal == Some(libc::SIGSYS) {
            r.killed_by_filter = Some(KILLED_BY_FILTER.into());
        }
        r
    }

    /// The profile as gVisor enforces it (runsc): who does, when there is
    /// a filter at all.
    pub fn enforced_by(mut self, who: &'static str) -> SeccompReport {
        if !self.unconfined {
            self.enforced_by = Some(who.into());
        }
        self
    }
}
