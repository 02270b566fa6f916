//! `husk features`: the runtime-spec features document (features.md,
//! features-linux.md) that engines read to learn what a runtime can do
//! before they hand it a config. It is fixed at build time, like runc's:
//! it says what this husk implements, not what the host offers today (a
//! config asking for something the host lacks still fails at `create`,
//! with the step and errno).
//!
//! Every list comes from the code that implements it where one exists:
//! capabilities from the capability table husk parses, seccomp actions,
//! operators, architectures and flags from husk's seccomp compiler. What
//! husk refuses is left out (SCMP_ACT_NOTIFY, idmapped mounts, the systemd
//! cgroup driver, AppArmor and SELinux labels), so an engine that reads
//! the document does not send it.

use super::version::{SPEC_VERSION, SPEC_VERSION_MIN};
use crate::seccomp::profile;
use serde_json::{Value, json};

/// The runtime-spec hooks husk runs (all of them).
pub const HOOKS: &[&str] = &["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"];

/// The namespaces a config may ask to create or join. `time` is there: it
/// is created (or joined) like the others; `timeOffsets` is refused.
pub const NAMESPACES: &[&str] = &["cgroup", "ipc", "mount", "network", "pid", "time", "user", "uts"];

/// Mount options husk's config reader turns into mount flags, propagation
/// or binds (anything else is passed to the filesystem as data, as runc
/// does; `rro` and the other `r*` attributes are mount_setattr with
/// AT_RECURSIVE).
pub const MOUNT_OPTIONS: &[&str] = &[
    "async",
    "atime",
    "bind",
    "defaults",
    "dev",
    "diratime",
    "dirsync",
    "exec",
    "mand",
    "noatime",
    "nodev",
    "nodiratime",
    "noexec",
    "nomand",
    "norelatime",
    "nostrictatime",
    "nosuid",
    "private",
    "ratime",
    "rbind",
    "rdev",
    "rdiratime",
    "relatime",
    "rexec",
    "rnoatime",
    "rnodev",
    "rnodiratime",
    "rnoexec",
    "rnorelatime",
    "rnostrictatime",
    "rnosuid",
    "rnosymfollow",
    "ro",
    "rprivate",
    "rrelatime",
    "rro",
    "rrw",
    "rshared",
    "rslave",
    "rstrictatime",
    "rsuid",
    "rsymfollow",
    "runbindable",
    "rw",
    "shared",
    "slave",
    "strictatime",
    "suid",
    "sync",
    "unbindable",
];

/// The seccomp actions a config may use. SCMP_ACT_TRACE is accepted and
/// behaves as with no tracer attached (the syscall fails with ENOSYS);
/// SCMP_ACT_NOTIFY needs an outside agent and is refused.
pub const SECCOMP_ACTIONS: &[&str] = &[
    "SCMP_ACT_ALLOW",
    "SCMP_ACT_ERRNO",
    "SCMP_ACT_KILL",
    "SCMP_ACT_KILL_PROCESS",
    "SCMP_ACT_KILL_THREAD",
    "SCMP_ACT_LOG",
    "SCMP_ACT_TRACE",
    "SCMP_ACT_TRAP",
];

pub const SECCOMP_OPERATORS: &[&str] =
    &["SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT", "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE"];

/// Capability names, in number order, as the `caps` crate husk parses with knows them.
fn capabilities() -> Vec<String> {
    let mut all: Vec<caps::Capability> = caps::all().into_iter().collect();
    all.sort_by_key(|c| c.index());
    all.iter().map(|c| c.to_string()).collect()
}

/// The features document (`husk features` prints it, pretty).
pub fn features_document() -> Value {
    let archs: Vec<&str> = profile::ARCHES.iter().copied().filter(|a| *a != "SCMP_ARCH_NATIVE").collect();
    let flags: Vec<&str> = profile::FLAGS.iter().map(|(name, _)| *name).collect();
    json!({
        "ociVersionMin": SPEC_VERSION_MIN,
        "ociVersionMax": SPEC_VERSION,
        "hooks": HOOKS,
        "mountOptions": MOUNT_OPTIONS,
        "linux": {
            "namespaces": NAMESPACES,
            "capabilities": capabilities(),
            "cgroup": {"v1": true, "v2": true, "systemd": false, "systemdUser": false, "rdma": false},
            "seccomp": {
                "enabled": true,
                "actions": SECCOMP_ACTIONS,
                "operators": SECCOMP_OPERATORS,
                "archs": archs,
                "knownFlags": flags,
                "supportedFlags": flags,
            },
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false},
            "intelRdt": {"enabled": false},
            "mountExtensions": {"idmap": {"enabled": false}},
        },
        "annotations": {
            "io.github.husk.version": env!("CARGO_PKG_VERSION"),
            "io.github.husk.commit": super::version::COMMIT,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every seccomp action the document names is one husk's compiler
    /// accepts, and NOTIFY (refused) is not named.
    #[test]
    fn seccomp_actions_listed_are_the_ones_the_compiler_takes() {
        let ctx = profile::Context { has_cap: &|_| Some(false), kernel: None };
        for action in SECCOMP_ACTIONS {
            let text = format!(r#"{{"defaultAction":"{action}"}}"#);
            let raw = profile::parse("features", &text).unwrap();
            assert!(raw.lower("features", &ctx).is_ok(), "{action} is listed but refused");
        }
        let raw = profile::parse("features", r#"{"defaultAction":"SCMP_ACT_NOTIFY"}"#).unwrap();
        assert!(raw.lower("features", &ctx).is_err(), "NOTIFY is refused, so it is not listed");
    }

    /// Every capability named parses back to a number husk knows.
    #[test]
    fn capabilities_listed_parse() {
        let caps = capabilities();
        assert!(caps.len() >= 41, "{caps:?}");
        for c in &caps {
            assert!(crate::capability::parse(c).is_some(), "{c}");
        }
    }
}
