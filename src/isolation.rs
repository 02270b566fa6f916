//! The verdict's `isolation`: what a backend actually applied (never what
//! was merely asked for). Each facility owns its part (`userns`'s id
//! mapping, `rootfs`'s root, `seccomp`'s filter, `plan`'s rlimits); a
//! backend assembles them (`backend::isolation_report`) and adds its own
//! (`kernel`, `runsc`). The type sits below `backend/` because the verdict
//! (`outcome`) and a sandbox's record (which keeps it for its execs) name
//! it. Schema: `isolation` in docs/verdict.schema.json.
//!
//! Fields stay in alphabetical order: the verdict's keys have always come
//! out sorted, and consumers that diff verdicts keep seeing the same bytes.

use crate::rootfs::RootReport;
use crate::seccomp::SeccompReport;
use crate::userns::UserMapping;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Isolation {
    /// Capabilities the command keeps.
    pub capabilities: Vec<String>,
    /// Isolation the user allowed to be missing, and that was (`no_cgroup`).
    pub downgrades: Vec<String>,
    /// `gvisor` under runsc; absent: the host's kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Cow<'static, str>>,
    pub namespaces: Vec<String>,
    /// `none` or `host`.
    pub network: Cow<'static, str>,
    pub no_new_privs: bool,
    #[serde(default)]
    pub rlimits: Vec<RlimitReport>,
    pub rootfs: RootReport,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runsc: Option<RunscReport>,
    /// `--runtime auto` only: what it chose, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_choice: Option<RuntimeChoiceNote>,
    pub seccomp: SeccompReport,
    /// Whom the command runs as, inside the sandbox.
    pub user: UserIds,
    pub user_mapping: UserMapping,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserIds {
    pub gid: u32,
    pub uid: u32,
}

/// runsc only: which runsc ran the sandbox, and how.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct RunscReport {
    pub cgroups: Cow<'static, str>,
    /// runsc applied the OCI seccomp profile inside the sandbox.
    pub oci_seccomp: bool,
    pub path: String,
    pub platform: String,
    /// runsc ran in its rootless mode.
    pub rootless: bool,
    pub version: String,
}

/// `--runtime auto`: the backend it chose, and why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RuntimeChoiceNote {
    /// `native` or `runsc`.
    pub chosen: Cow<'static, str>,
    /// Always `auto`.
    pub requested: Cow<'static, str>,
    pub why: String,
}

impl RuntimeChoiceNote {
    pub fn auto(chosen: &'static str, why: String) -> RuntimeChoiceNote {
        RuntimeChoiceNote { chosen: chosen.into(), requested: "auto".into(), why }
    }
}

/// One entry of the verdict's `isolation.rlimits` (`plan::Rlimit::report`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RlimitReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clamped_from: Option<RlimitValue>,
    pub hard: RlimitValue,
    pub name: std::borrow::Cow<'static, str>,
    pub soft: RlimitValue,
    /// `flag` (--rlimit) or `default`.
    pub source: std::borrow::Cow<'static, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<std::borrow::Cow<'static, str>>,
}

/// A limit as the verdict shows it: a number, or `"unlimited"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum RlimitValue {
    Limited(u64),
    Unlimited(Unlimited),
}

impl RlimitValue {
    pub fn of(v: u64) -> RlimitValue {
        if v == libc::RLIM_INFINITY { RlimitValue::Unlimited(Unlimited) } else { RlimitValue::Limited(v) }
    }
}

/// The word `unlimited` (and only it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unlimited;

const UNLIMITED: &str = "unlimited";

impl serde::Serialize for Unlimited {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(UNLIMITED)
    }
}

impl<'de> serde::Deserialize<'de> for Unlimited {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = String::deserialize(d)?;
        if w == UNLIMITED {
            Ok(Unlimited)
        } else {
            Err(serde::de::Error::custom(format!("expected \"{UNLIMITED}\", not \"{w}\"")))
        }
    }
}
