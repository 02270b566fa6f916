//! Facts about this host, probed once per command and then passed down, so
//! no call site has to re-discover (or guess) what the kernel supports.

pub mod blockers;

use crate::files::read_text;
use crate::spec::IdRange;
use nix::unistd::{Gid, Uid};
use std::path::{Path, PathBuf};

/// Default host id range for privileged runs when /etc/subuid has no `husk`
/// entry: high enough that no real account owns it.
pub const DEFAULT_ID_RANGE: IdRange = IdRange { base: 1_000_000_000, count: 65536 };

#[derive(Clone, Debug)]
pub struct HostFacts {
    /// Effective uid/gid of husk on the host.
    pub uid: u32,
    pub gid: u32,
    /// husk runs as host root (maps the sandbox onto an unprivileged range).
    pub privileged: bool,
    /// Highest capability number this kernel knows.
    pub last_cap: u32,
    /// `husk` entries of /etc/subuid and /etc/subgid, when both exist.
    pub subid: Option<(IdRange, IdRange)>,
    /// husk's store (images, layers, compiled seccomp profiles): `--root`,
    /// else /var/lib/husk as root, $XDG_DATA_HOME/husk otherwise.
    pub store_root: PathBuf,
    /// cgroup layout (v2 / v1 / hybrid, mounts, controllers, own cgroup),
    /// probed on first use: a run with --no-cgroup never reads it.
    pub(crate) cgroup: std::sync::OnceLock<crate::cgroup::CgroupHost>,
    /// What the backends need of the kernel (`blockers::ROWS` reads it),
    /// probed on first use: a native run never reads it.
    pub(crate) view: std::sync::OnceLock<HostView>,
}

impl HostFacts {
    pub fn probe() -> HostFacts {
        let uid = Uid::effective().as_raw();
        let gid = Gid::effective().as_raw();
        let last_cap =
            read_text("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(40);
        let subid = match (read_subid("/etc/subuid", "husk"), read_subid("/etc/subgid", "husk")) {
            (Some(u), Some(g)) => Some((u, g)),
            _ => None,
        };
        let (cgroup, view) = (std::sync::OnceLock::new(), std::sync::OnceLock::new());
        HostFacts { uid, gid, privileged: uid == 0, last_cap, subid, store_root: default_store_root(), cgroup, view }
    }

    /// What the backends need of the kernel (read from /proc on the first call).
    pub fn view(&self) -> &HostView {
        self.view.get_or_init(HostView::probe)
    }

    /// The cgroup layout (read from /proc on the first call).
    pub fn cgroup(&self) -> &crate::cgroup::CgroupHost {
        self.cgroup.get_or_init(crate::cgroup::CgroupHost::probe)
    }
}

/// The host facts the backends' needs are judged by (`blockers::ROWS`);
/// a value, so tests can set them.
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
    /// The kernel offers seccomp (a Seccomp field in /proc/self/status).
    pub seccomp: bool,
    pub pidfd: bool,
    pub ptrace_scope: Option<i64>,
}

impl HostView {
    pub fn probe() -> HostView {
        let root = Uid::effective().is_root();
        let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        let initial_userns = is_initial_uid_map(&uid_map);
        let range = read_subid("/etc/subuid", "husk").unwrap_or(DEFAULT_ID_RANGE);
        HostView {
            root,
            initial_userns,
            max_user_namespaces: sysctl_int("user/max_user_namespaces"),
            apparmor_restrict_unprivileged_userns: sysctl_int("kernel/apparmor_restrict_unprivileged_userns"),
            unprivileged_userns_clone: sysctl_int("kernel/unprivileged_userns_clone"),
            id_range_mapped: initial_userns || covers(&uid_map, range),
            overlayfs: std::fs::read_to_string("/proc/filesystems").unwrap_or_default().contains("\toverlay\n"),
            seccomp: std::fs::read_to_string("/proc/self/status").unwrap_or_default().contains("Seccomp:"),
            pidfd: crate::sys::process::pidfd_open(nix::unistd::getpid()).is_ok(),
            ptrace_scope: sysctl_int("kernel/yama/ptrace_scope"),
        }
    }
}

/// The initial user namespace maps every id onto itself.
pub fn initial_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| is_initial_uid_map(&m))
}

fn is_initial_uid_map(uid_map: &str) -> bool {
    uid_map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]
}

/// Whether a uid_map (inner outer count lines) maps every id of `range`.
pub fn covers(uid_map: &str, range: IdRange) -> bool {
    let (lo, hi) = (range.base as u64, range.base as u64 + range.count as u64);
    uid_map.lines().any(|l| {
        let f: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        f.len() == 3 && f[0] <= lo && hi <= f[0] + f[2]
    })
}

/// The store directory when `--root` is not given (the rules of
/// src/paths.rs; commands that take `--root` replace it).
pub fn default_store_root() -> PathBuf {
    crate::paths::Paths::resolve(None, None, &crate::paths::Env::current())
        .map(|p| p.root)
        .unwrap_or_else(|_| PathBuf::from("/nonexistent"))
}

/// First `name:start:count` line for `name` in a subordinate-id file.
pub fn read_subid(path: impl AsRef<Path>, name: &str) -> Option<IdRange> {
    let text = read_text(path).ok()?;
    parse_subid(&text, name)
}

pub fn parse_subid(text: &str, name: &str) -> Option<IdRange> {
    text.lines().find_map(|line| {
        let mut it = line.trim().split(':');
        let (who, base, count) = (it.next()?, it.next()?, it.next()?);
        if who != name {
            return None;
        }
        let range = IdRange { base: base.parse().ok()?, count: count.parse().ok()? };
        (range.count > 0).then_some(range)
    })
}

/// `HUSK_NO_CGROUP` set to a true value, as clap reads it for --no-cgroup
/// (its BoolishValueParser): what `husk doctor` and the runsc check read
/// when no command line says.
pub fn no_cgroup_opt_out() -> bool {
    std::env::var("HUSK_NO_CGROUP")
        .map(|v| matches!(v.to_ascii_lowercase().as_str(), "y" | "yes" | "t" | "true" | "on" | "1"))
        .unwrap_or(false)
}

/// The first executable file called `name` in `$PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
    })
}

/// Reads one integer sysctl under /proc/sys (for diagnosis messages).
pub fn sysctl_int(path: &str) -> Option<i64> {
    std::fs::read_to_string(Path::new("/proc/sys").join(path)).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subid_entry_for_husk_is_found() {
        let text = "alice:100000:65536\nhusk:300000:65536\n";
        assert_eq!(parse_subid(text, "husk"), Some(IdRange { base: 300000, count: 65536 }));
        assert_eq!(parse_subid(text, "bob"), None);
        assert_eq!(parse_subid("husk:1:0\n", "husk"), None);
        assert_eq!(parse_subid("husk:x:5\n", "husk"), None);
    }
}
