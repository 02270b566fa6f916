//! `--runtime auto`: native where this host supports full native isolation,
//! else runsc where it is installed and can work here, else a refusal that
//! names both reasons. Decided from cheap host facts (a few sysctls and
//! /proc files, the runsc binary and its cached version) and never by
//! running a sandbox per run. Whatever is picked, the verdict says which
//! backend ran and why.

use super::runsc::config::RunscConfig;
use crate::host::{DEFAULT_ID_RANGE, sysctl_int};
use crate::spec::IdRange;

/// The host facts both decisions rest on (a value, so tests can set them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostView {
    /// husk's effective uid is 0.
    pub root: bool,
    /// husk runs in the host's (initial) user namespace.
    pub initial_userns: bool,
    pub max_user_namespaces: Option<i64>,
    pub apparmor_restrict_unprivileged_userns: Option<i64>,
    pub unprivileged_userns_clone: Option<i64>,
    /// As root in a nested user namespace: whether that namespace maps the
    /// id range native runs map the sandbox onto.
    pub id_range_mapped: bool,
    pub overlayfs: bool,
    pub pidfd: bool,
    pub ptrace_scope: Option<i64>,
}

impl HostView {
    pub fn probe() -> HostView {
        let root = nix::unistd::Uid::effective().is_root();
        let initial_userns = super::runsc::config::initial_user_namespace();
        let range = crate::host::read_subid("/etc/subuid", "husk").unwrap_or(DEFAULT_ID_RANGE);
        let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        HostView {
            root,
            initial_userns,
            max_user_namespaces: sysctl_int("user/max_user_namespaces"),
            apparmor_restrict_unprivileged_userns: sysctl_int("kernel/apparmor_restrict_unprivileged_userns"),
            unprivileged_userns_clone: sysctl_int("kernel/unprivileged_userns_clone"),
            id_range_mapped: initial_userns || covers(&uid_map, range),
            overlayfs: std::fs::read_to_string("/proc/filesystems").unwrap_or_default().contains("\toverlay\n"),
            pidfd: crate::sys::process::pidfd_open(nix::unistd::getpid()).is_ok(),
            ptrace_scope: sysctl_int("kernel/yama/ptrace_scope"),
        }
    }
}

/// Whether a uid_map (inner outer count lines) maps every id of `range`.
pub fn covers(uid_map: &str, range: IdRange) -> bool {
    let (lo, hi) = (range.base as u64, range.base as u64 + range.count as u64);
    uid_map.lines().any(|l| {
        let f: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        f.len() == 3 && f[0] <= lo && hi <= f[0] + f[2]
    })
}

/// Reasons user namespaces cannot be created here (by husk, as `root` or not).
fn userns_blockers(v: &HostView, root: bool, whose: &str) -> Vec<String> {
    let mut r = Vec::new();
    if v.max_user_namespaces == Some(0) {
        r.push(format!(
            "{whose} needs a new user namespace, and user namespaces are disabled here (user.max_user_namespaces = 0; fix: sysctl -w user.max_user_namespaces=15000)"
        ));
    }
    if !root && v.apparmor_restrict_unprivileged_userns == Some(1) {
        r.push(format!(
            "{whose} needs an unprivileged user namespace, and AppArmor restricts them (kernel.apparmor_restrict_unprivileged_userns = 1; fix: set it to 0, or run as root)"
        ));
    }
    if !root && v.unprivileged_userns_clone == Some(0) {
        r.push(format!(
            "{whose} needs an unprivileged user namespace, and they are off (kernel.unprivileged_userns_clone = 0; fix: set it to 1, or run as root)"
        ));
    }
    r
}

/// Why full native isolation cannot work here; empty when it can.
pub fn native_blockers(v: &HostView) -> Vec<String> {
    let mut r = userns_blockers(v, v.root && v.initial_userns, "the native backend");
    if v.root && !v.initial_userns && !v.id_range_mapped {
        r.push(
            "husk is root inside a user namespace that does not map the sandbox's id range (see --id-range and /etc/subuid)"
                .into(),
        );
    }
    if !v.overlayfs {
        r.push("overlayfs is not available (fix: modprobe overlay)".into());
    }
    if !v.pidfd {
        r.push("pidfd_open(2) is not supported (Linux 5.3 or newer is needed)".into());
    }
    r
}

/// Why runsc (with `platform`) cannot work here; empty when it can. As
/// root, runsc starts its sandbox in a user namespace of its own; rootless,
/// husk creates one to be root in.
pub fn runsc_blockers(v: &HostView, platform: &str) -> Vec<String> {
    let root = v.root && v.initial_userns;
    let mut r = userns_blockers(v, root, "runsc");
    if !v.overlayfs {
        r.push("overlayfs is not available; husk builds the sandbox's root with it (fix: modprobe overlay)".into());
    }
    if platform == "ptrace" && v.ptrace_scope == Some(3) {
        r.push("runsc's ptrace platform needs ptrace, which kernel.yama.ptrace_scope = 3 forbids".into());
    }
    r
}

/// The decision and why.
#[derive(Debug)]
pub enum Pick {
    Native,
    Runsc(RunscConfig),
}

/// What auto saw: native's blockers, and runsc's config or why it cannot
/// be used (probed only when native is blocked).
#[derive(Debug)]
pub struct Facts {
    pub native: Vec<String>,
    pub runsc: Option<Result<RunscConfig, Vec<String>>>,
}

impl Facts {
    /// `runsc` is called only when native is blocked (it may start runsc
    /// once to learn its version, cached per binary afterwards).
    pub fn probe(v: &HostView, runsc: impl FnOnce() -> Result<RunscConfig, String>) -> Facts {
        let native = native_blockers(v);
        let runsc = (!native.is_empty()).then(|| match runsc() {
            Ok(cfg) => {
                let b = runsc_blockers(v, &cfg.platform);
                if b.is_empty() { Ok(cfg) } else { Err(b) }
            }
            Err(e) => Err(vec![e]),
        });
        Facts { native, runsc }
    }
}

/// Native when nothing blocks it; else runsc; else an error naming both.
/// The note goes into the verdict (`isolation.runtime_choice`).
pub fn choose(f: Facts) -> Result<(Pick, serde_json::Value), String> {
    if f.native.is_empty() {
        let note =
            serde_json::json!({"requested": "auto", "chosen": "native", "why": "the host supports native isolation"});
        return Ok((Pick::Native, note));
    }
    match f.runsc {
        Some(Ok(cfg)) => {
            let note = serde_json::json!({
                "requested": "auto",
                "chosen": "runsc",
                "why": format!("native isolation is unavailable: {}", f.native.join("; ")),
            });
            Ok((Pick::Runsc(cfg), note))
        }
        Some(Err(r)) => Err(format!(
            "--runtime auto: no backend can isolate this command here. native: {}. runsc: {}",
            f.native.join("; "),
            r.join("; ")
        )),
        None => Err(format!("--runtime auto: native isolation is unavailable: {}", f.native.join("; "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::runsc::config::{Info, Mode};

    fn healthy() -> HostView {
        HostView {
            root: true,
            initial_userns: true,
            max_user_namespaces: Some(15000),
            apparmor_restrict_unprivileged_userns: None,
            unprivileged_userns_clone: None,
            id_range_mapped: true,
            overlayfs: true,
            pidfd: true,
            ptrace_scope: Some(1),
        }
    }

    fn cfg() -> RunscConfig {
        RunscConfig {
            bin: "/usr/bin/runsc".into(),
            info: Info { version: "test".into(), platforms: vec!["ptrace".into()] },
            platform: "ptrace".into(),
            mode: Mode::Root,
            state: "/run/husk".into(),
        }
    }

    #[test]
    fn auto_picks_native_where_the_host_supports_it_without_looking_at_runsc() {
        let f = Facts::probe(&healthy(), || panic!("runsc must not be probed when native works"));
        let (pick, note) = choose(f).unwrap();
        assert!(matches!(pick, Pick::Native));
        assert_eq!(note["chosen"], "native");
    }

    #[test]
    fn auto_picks_runsc_when_native_is_unavailable_and_says_why() {
        // Rootless where AppArmor blocks unprivileged user namespaces for
        // native... and for runsc as well: both refused.
        let mut v = healthy();
        v.root = false;
        v.apparmor_restrict_unprivileged_userns = Some(1);
        let err = choose(Facts::probe(&v, || Ok(cfg()))).unwrap_err();
        assert!(err.contains("native:") && err.contains("runsc:"), "{err}");
        // Native blocked (no pidfd) but runsc fine: runsc, with the reason.
        let mut v = healthy();
        v.pidfd = false;
        let (pick, note) = choose(Facts::probe(&v, || Ok(cfg()))).unwrap();
        assert!(matches!(pick, Pick::Runsc(_)));
        assert_eq!(note["chosen"], "runsc");
        assert!(note["why"].as_str().unwrap().contains("pidfd"), "{note}");
    }

    #[test]
    fn auto_refuses_naming_both_reasons() {
        let mut v = healthy();
        v.max_user_namespaces = Some(0);
        let err = choose(Facts::probe(&v, || Ok(cfg()))).unwrap_err();
        assert!(err.contains("native: the native backend needs a new user namespace"), "{err}");
        assert!(err.contains("runsc: runsc needs a new user namespace"), "{err}");
        let err = choose(Facts::probe(&v, || Err("runsc is not installed".into()))).unwrap_err();
        assert!(err.contains("runsc: runsc is not installed"), "{err}");
        let mut v = healthy();
        v.overlayfs = false;
        v.ptrace_scope = Some(3);
        let err = choose(Facts::probe(&v, || Ok(cfg()))).unwrap_err();
        assert!(err.contains("ptrace_scope = 3"), "{err}");
    }

    #[test]
    fn root_in_a_user_namespace_needs_the_id_range_mapped() {
        let mut v = healthy();
        v.initial_userns = false;
        v.id_range_mapped = false;
        assert_eq!(native_blockers(&v).len(), 1);
        assert!(runsc_blockers(&v, "ptrace").is_empty());
        assert!(covers("0 0 4294967295\n", DEFAULT_ID_RANGE));
        assert!(!covers("0 1000 1\n", DEFAULT_ID_RANGE));
        assert!(covers("0 100000 65536\n1000000000 2000000000 65536\n", DEFAULT_ID_RANGE));
    }
}
