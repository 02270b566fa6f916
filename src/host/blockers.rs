//! The one table of what this host must offer a backend: each row is a
//! fact, why a backend needs it, and how to fix the host. `husk doctor`
//! renders the rows, `--runtime auto` and `--runtime runsc` decide from
//! them, and a failed clone looks its hint up here.

use super::HostView;
use crate::sys::Errno;

/// Who needs a fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// The native backend only.
    Native,
    /// Both backends (runsc: its sandbox's user namespace and husk's overlay
    /// root).
    Both,
    /// runsc on its ptrace platform.
    RunscPtrace,
}

/// One row of the table.
pub struct Row {
    /// `husk doctor`'s check name.
    pub check: &'static str,
    pub needs: Needs,
    /// What was seen (doctor's detail), or None when this host has nothing
    /// to say about it (a sysctl this kernel lacks): then the row neither
    /// blocks nor shows.
    pub seen: fn(&HostView) -> Option<String>,
    /// Whether what was seen blocks (husk as `root`: root in the host's
    /// user namespace, where unprivileged-namespace restrictions do not apply).
    pub blocks: fn(&HostView, bool) -> bool,
    /// Whether the row binds husk as `root` at all (doctor's "required").
    pub binds_root: bool,
    /// Why it blocks, after "<who> ": "needs ..., and ...".
    pub why: &'static str,
    pub fix: Option<&'static str>,
    /// A clone(2) failing with this errno (any errno: None) while the row
    /// blocks is explained by it.
    pub clone_errno: Option<Errno>,
}

/// What blocks, in the order doctor lists its checks.
pub const ROWS: &[Row] = &[
    Row {
        check: "user_namespaces",
        needs: Needs::Both,
        seen: |v| {
            Some(format!(
                "user.max_user_namespaces = {}",
                v.max_user_namespaces.map_or("unknown".into(), |n| n.to_string())
            ))
        },
        blocks: |v, _| v.max_user_namespaces == Some(0),
        binds_root: true,
        why: "needs a new user namespace, and user namespaces are disabled here",
        fix: Some("sysctl -w user.max_user_namespaces=15000"),
        clone_errno: None,
    },
    Row {
        check: "apparmor_userns",
        needs: Needs::Both,
        seen: |v| {
            v.apparmor_restrict_unprivileged_userns
                .map(|n| format!("kernel.apparmor_restrict_unprivileged_userns = {n}"))
        },
        blocks: |v, root| !root && v.apparmor_restrict_unprivileged_userns == Some(1),
        binds_root: false,
        why: "needs an unprivileged user namespace, and AppArmor restricts them",
        fix: Some("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or run husk as root)"),
        clone_errno: Some(Errno::EACCES),
    },
    Row {
        check: "unprivileged_userns_clone",
        needs: Needs::Both,
        seen: |v| v.unprivileged_userns_clone.map(|n| format!("kernel.unprivileged_userns_clone = {n}")),
        blocks: |v, root| !root && v.unprivileged_userns_clone == Some(0),
        binds_root: false,
        why: "needs an unprivileged user namespace, and they are off",
        fix: Some("sysctl -w kernel.unprivileged_userns_clone=1 (or run husk as root)"),
        clone_errno: None,
    },
    Row {
        check: "id_range",
        needs: Needs::Native,
        seen: |v| {
            (v.root && !v.initial_userns).then(|| {
                format!(
                    "the sandbox's id range is {}mapped in husk's user namespace",
                    if v.id_range_mapped { "" } else { "not " }
                )
            })
        },
        blocks: |v, _| v.root && !v.initial_userns && !v.id_range_mapped,
        binds_root: true,
        why: "needs the sandbox's id range, and husk is root inside a user namespace that does not map it",
        fix: Some("map the range into husk's user namespace, or pick a mapped one with --id-range or /etc/subuid"),
        clone_errno: None,
    },
    Row {
        check: "overlayfs",
        needs: Needs::Both,
        seen: |v| Some(format!("overlay {}in /proc/filesystems", if v.overlayfs { "" } else { "not " })),
        blocks: |v, _| !v.overlayfs,
        binds_root: true,
        why: "builds the sandbox's root with overlayfs, which is not available",
        fix: Some("modprobe overlay"),
        clone_errno: None,
    },
    Row {
        check: "seccomp",
        needs: Needs::Native,
        seen: |v| Some(format!("Seccomp field {}in /proc/self/status", if v.seccomp { "" } else { "not " })),
        blocks: |v, _| !v.seccomp,
        binds_root: true,
        why: "needs seccomp filters, which this kernel does not offer",
        fix: Some("a kernel built with CONFIG_SECCOMP_FILTER"),
        clone_errno: None,
    },
    Row {
        check: "pidfd",
        needs: Needs::Native,
        seen: |v| Some(format!("pidfd_open(2){}", if v.pidfd { "" } else { " is not supported" })),
        blocks: |v, _| !v.pidfd,
        binds_root: true,
        why: "needs pidfd_open(2)",
        fix: Some("Linux 5.3 or newer"),
        clone_errno: None,
    },
    Row {
        check: "ptrace_scope",
        needs: Needs::RunscPtrace,
        seen: |v| v.ptrace_scope.map(|n| format!("kernel.yama.ptrace_scope = {n}")),
        blocks: |v, _| v.ptrace_scope == Some(3),
        binds_root: true,
        why: "on its ptrace platform needs ptrace, which Yama forbids",
        fix: Some("sysctl -w kernel.yama.ptrace_scope=1, or another runsc platform (--runsc-platform)"),
        clone_errno: None,
    },
];

impl Row {
    /// "<who> <why> (<seen>; fix: <fix>)": one sentence with its remedy.
    pub fn explain(&self, v: &HostView, who: &str) -> String {
        let seen = (self.seen)(v).unwrap_or_default();
        match self.fix {
            Some(fix) => format!("{who} {} ({seen}; fix: {fix})", self.why),
            None => format!("{who} {} ({seen})", self.why),
        }
    }

    fn blocking(&self, v: &HostView) -> bool {
        (self.seen)(v).is_some() && (self.blocks)(v, v.root && v.initial_userns)
    }
}

/// Why full native isolation cannot work here; empty when it can.
pub fn native(v: &HostView) -> Vec<String> {
    rows_blocking(v, |n| matches!(n, Needs::Native | Needs::Both), "the native backend")
}

/// Why runsc (with `platform`) cannot work here; empty when it can. As
/// root, runsc starts its sandbox in a user namespace of its own; rootless,
/// husk creates one to be root in.
pub fn runsc(v: &HostView, platform: &str) -> Vec<String> {
    rows_blocking(v, |n| n == Needs::Both || (n == Needs::RunscPtrace && platform == "ptrace"), "runsc")
}

fn rows_blocking(v: &HostView, wanted: impl Fn(Needs) -> bool, who: &str) -> Vec<String> {
    ROWS.iter().filter(|r| wanted(r.needs) && r.blocking(v)).map(|r| r.explain(v, who)).collect()
}

/// The host setting behind a failed clone of the sandbox, if one explains it.
pub fn clone_hint(v: &HostView, errno: Errno) -> Option<String> {
    let row = ROWS.iter().filter(|r| r.needs == Needs::Both).find(|r| {
        r.clone_errno.is_none_or(|e| e == errno) && (r.seen)(v).is_some() && (r.blocks)(v, v.privileged_clone())
    });
    if let Some(row) = row {
        return Some(row.explain(v, "husk"));
    }
    match errno {
        Errno::ENOSPC => Some("namespace limit reached (user.max_user_namespaces or similar); raise it or wait".into()),
        Errno::EPERM => {
            Some("not permitted to create namespaces here (nested container or seccomp?); run `husk doctor`".into())
        }
        _ => None,
    }
}

impl HostView {
    /// A clone by husk as root in the host's user namespace: the limits on
    /// unprivileged user namespaces do not apply to it.
    fn privileged_clone(&self) -> bool {
        self.root && self.initial_userns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rootless() -> HostView {
        HostView {
            root: false,
            initial_userns: true,
            max_user_namespaces: Some(15000),
            apparmor_restrict_unprivileged_userns: Some(0),
            unprivileged_userns_clone: None,
            id_range_mapped: true,
            overlayfs: true,
            seccomp: true,
            pidfd: true,
            ptrace_scope: Some(1),
        }
    }

    /// A failed clone names the host setting and its fix from the same row
    /// `--runtime auto` and doctor use, not a copy of its own.
    #[test]
    fn clone_failure_hint_comes_from_the_blocking_row() {
        let mut v = rootless();
        v.max_user_namespaces = Some(0);
        let hint = clone_hint(&v, Errno::ENOSPC).unwrap();
        assert!(
            hint.contains("user.max_user_namespaces = 0")
                && hint.contains("fix: sysctl -w user.max_user_namespaces=15000"),
            "{hint}"
        );
        assert!(native(&v)[0].contains("fix: sysctl -w user.max_user_namespaces=15000"));

        // AppArmor's restriction explains EACCES, for an unprivileged husk only.
        let mut v = rootless();
        v.apparmor_restrict_unprivileged_userns = Some(1);
        assert!(clone_hint(&v, Errno::EACCES).unwrap().contains("AppArmor"));
        assert!(!clone_hint(&v, Errno::EPERM).unwrap().contains("AppArmor"));
        v.root = true;
        assert_eq!(clone_hint(&v, Errno::EACCES), None);
        assert!(native(&v).is_empty());
    }

    /// A sysctl this kernel lacks neither blocks nor shows.
    #[test]
    fn absent_sysctl_blocks_nothing() {
        let mut v = rootless();
        v.apparmor_restrict_unprivileged_userns = None;
        v.unprivileged_userns_clone = None;
        v.ptrace_scope = None;
        assert!(native(&v).is_empty() && runsc(&v, "ptrace").is_empty());
        assert_eq!(clone_hint(&v, Errno::EINVAL), None);
    }
}
