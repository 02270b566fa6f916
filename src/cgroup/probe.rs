//! The host's cgroup layout, probed once per command (`HostFacts::probe`):
//! which hierarchies are mounted where, which controllers each carries, and
//! where husk itself lives in each. Everything else in `cgroup` works from
//! this value, so tests can hand it a layout rooted in a temp dir.

use std::path::{Path, PathBuf};

/// The controllers husk knows about (cpuset, io, devices... are left alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    Memory,
    Cpu,
    Cpuacct,
    Pids,
    Freezer,
}

impl Controller {
    pub const ALL: [Controller; 5] =
        [Controller::Memory, Controller::Cpu, Controller::Cpuacct, Controller::Pids, Controller::Freezer];

    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Cpuacct => "cpuacct",
            Controller::Pids => "pids",
            Controller::Freezer => "freezer",
        }
    }

    pub fn from_name(s: &str) -> Option<Controller> {
        Controller::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// How the host mounts cgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupMode {
    /// cgroup v2 only (the unified hierarchy carries the controllers).
    Unified,
    /// v1 controller hierarchies plus a (controller-less) cgroup2 mount.
    Hybrid,
    /// v1 controller hierarchies only.
    Legacy,
    /// No cgroup filesystem mounted.
    Absent,
}

impl CgroupMode {
    pub fn name(self) -> &'static str {
        match self {
            CgroupMode::Unified => "v2",
            CgroupMode::Hybrid => "hybrid",
            CgroupMode::Legacy => "v1",
            CgroupMode::Absent => "none",
        }
    }
}

/// One mounted hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Mount point (e.g. /sys/fs/cgroup/memory).
    pub path: PathBuf,
    /// The cgroup path the mount point shows (mountinfo's root field; not
    /// "/" inside a cgroup namespace or a bind of a subtree).
    pub root: String,
    /// Controllers husk knows that this hierarchy carries (v1), or that the
    /// root's cgroup.controllers lists (v2).
    pub controllers: Vec<Controller>,
    /// husk's own cgroup in this hierarchy (from /proc/self/cgroup).
    pub own: Option<String>,
}

impl Mount {
    /// The directory of cgroup `path` (as /proc/self/cgroup names it), if
    /// it is visible under this mount.
    pub fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let rel = if self.root == "/" { Some(path) } else { path.strip_prefix(self.root.as_str()) }?;
        let rel = rel.trim_start_matches('/');
        if rel.split('/').any(|c| c == "..") {
            return None;
        }
        Some(if rel.is_empty() { self.path.clone() } else { self.path.join(rel) })
    }

    /// husk's own cgroup directory in this hierarchy.
    pub fn own_dir(&self) -> Option<PathBuf> {
        self.dir_of(self.own.as_deref()?)
    }

    pub fn has(&self, c: Controller) -> bool {
        self.controllers.contains(&c)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupHost {
    pub mode: CgroupMode,
    /// The cgroup2 mount, if any.
    pub unified: Option<Mount>,
    /// v1 hierarchies carrying at least one controller husk knows.
    pub v1: Vec<Mount>,
    /// Kernel has cgroup.kill (5.14+); else kill falls back to the freezer.
    pub cgroup_kill: bool,
}

impl Default for CgroupHost {
    /// No cgroup filesystem.
    fn default() -> Self {
        CgroupHost { mode: CgroupMode::Absent, unified: None, v1: Vec::new(), cgroup_kill: false }
    }
}

impl CgroupHost {
    /// Reads /proc/self/mountinfo, /proc/self/cgroup and the unified root's
    /// cgroup.controllers.
    pub fn probe() -> CgroupHost {
        let mountinfo = crate::files::read_text("/proc/self/mountinfo").unwrap_or_default();
        let own = crate::files::read_text("/proc/self/cgroup").unwrap_or_default();
        // cgroup.kill: 5.14.
        let kill = crate::kernel::kernel_version().is_some_and(|v| v >= (5, 14));
        let mut host = CgroupHost::from_texts(&mountinfo, &own, kill);
        if let Some(u) = &mut host.unified {
            let text = crate::files::read_text(u.path.join("cgroup.controllers")).unwrap_or_default();
            u.controllers = text.split_whitespace().filter_map(Controller::from_name).collect();
        }
        host
    }

    /// The layout from the texts of mountinfo and /proc/self/cgroup (the
    /// unified mount's controllers are left empty: they come from a file).
    pub fn from_texts(mountinfo: &str, self_cgroup: &str, cgroup_kill: bool) -> CgroupHost {
        let own = parse_self_cgroup(self_cgroup);
        let mut unified: Option<Mount> = None;
        let mut v1: Vec<Mount> = Vec::new();
        for m in mountinfo.lines().filter_map(parse_mountinfo_line) {
            match m.fstype.as_str() {
                "cgroup2" if unified.is_none() => {
                    let own = own.iter().find(|(k, _)| k.is_empty()).map(|(_, p)| p.clone());
                    unified = Some(Mount { path: m.mount_point, root: m.root, controllers: Vec::new(), own });
                }
                "cgroup" => {
                    let ctrls: Vec<Controller> = m.super_opts.split(',').filter_map(Controller::from_name).collect();
                    if ctrls.is_empty() || v1.iter().any(|x| x.controllers.iter().any(|c| ctrls.contains(c))) {
                        continue;
                    }
                    let key: Vec<&str> = ctrls.iter().map(|c| c.name()).collect();
                    let own = own
                        .iter()
                        .find(|(k, _)| key.iter().all(|n| k.split(',').any(|x| x == *n)))
                        .map(|(_, p)| p.clone());
                    v1.push(Mount { path: m.mount_point, root: m.root, controllers: ctrls, own });
                }
                _ => {}
            }
        }
        let mode = match (v1.is_empty(), unified.is_some()) {
            (true, true) => CgroupMode::Unified,
            (false, true) => CgroupMode::Hybrid,
            (false, false) => CgroupMode::Legacy,
            (true, false) => CgroupMode::Absent,
        };
        CgroupHost { mode, unified, v1, cgroup_kill }
    }

    /// The v1 hierarchy carrying `c`.
    pub fn v1_mount(&self, c: Controller) -> Option<&Mount> {
        self.v1.iter().find(|m| m.has(c))
    }
}

struct MountLine {
    root: String,
    mount_point: PathBuf,
    fstype: String,
    super_opts: String,
}

/// `36 25 0:32 / /sys/fs/cgroup/memory rw,relatime shared:15 - cgroup cgroup rw,memory`
fn parse_mountinfo_line(line: &str) -> Option<MountLine> {
    let (pre, post) = line.split_once(" - ")?;
    let pre: Vec<&str> = pre.split(' ').collect();
    let post: Vec<&str> = post.split(' ').collect();
    if pre.len() < 5 || post.len() < 3 {
        return None;
    }
    Some(MountLine {
        root: crate::files::unescape_mountinfo(pre[3]),
        mount_point: PathBuf::from(crate::files::unescape_mountinfo(pre[4])),
        fstype: post[0].to_string(),
        super_opts: post[2].to_string(),
    })
}

/// `/proc/self/cgroup` lines `ID:CONTROLLERS:PATH` -> (controllers, path);
/// the unified hierarchy has empty controllers.
pub fn parse_self_cgroup(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let (_id, ctrls, path) = (it.next()?, it.next()?, it.next()?);
            Some((ctrls.to_string(), path.to_string()))
        })
        .collect()
}

/// Whether `dir` is a cgroup the caller (uid) was delegated: it owns the
/// directory and may write the files a delegate needs (cgroup.procs to move
/// processes, cgroup.subtree_control to enable controllers).
pub fn is_delegated(dir: &Path, uid: u32) -> bool {
    use nix::unistd::{AccessFlags, access};
    use std::os::unix::fs::MetadataExt;
    let owned = std::fs::metadata(dir).map(|m| m.uid() == uid).unwrap_or(false);
    owned
        && access(&dir.join("cgroup.procs"), AccessFlags::W_OK).is_ok()
        && std::fs::metadata(dir.join("cgroup.procs")).map(|m| m.uid() == uid).unwrap_or(false)
}

/// The top of the subtree delegated to `uid` that contains `own`: walks up
/// from husk's own cgroup while each directory is delegated (within the
/// mount point, never above it).
pub fn delegated_root(mount: &Path, own: &Path, uid: u32) -> Option<PathBuf> {
    let mut best = None;
    let mut cur = Some(own);
    while let Some(dir) = cur {
        if !dir.starts_with(mount) || !is_delegated(dir, uid) {
            break;
        }
        best = Some(dir.to_path_buf());
        if dir == mount {
            break;
        }
        cur = dir.parent();
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_SELF: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/bb7c\n2:cpuacct:/\n1:cpu:/\n0::/\n";

    #[test]
    fn hybrid_layout_is_recognised() {
        let h = CgroupHost::from_texts(HYBRID, HYBRID_SELF, true);
        assert_eq!(h.mode, CgroupMode::Hybrid);
        assert_eq!(h.unified.as_ref().unwrap().path, Path::new("/sys/fs/cgroup/unified"));
        let mem = h.v1_mount(Controller::Memory).unwrap();
        assert_eq!(mem.path, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(mem.own_dir().unwrap(), Path::new("/sys/fs/cgroup/memory/process_api/bb7c"));
        assert_eq!(h.v1.len(), 5);
        assert!(h.v1.iter().all(|m| !m.path.ends_with("systemd")));
    }

    #[test]
    fn comounted_cpu_cpuacct_is_one_hierarchy() {
        let mi = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
        let h = CgroupHost::from_texts(mi, "3:cpu,cpuacct:/a\n", false);
        assert_eq!(h.mode, CgroupMode::Legacy);
        assert_eq!(h.v1.len(), 1);
        assert!(h.v1[0].has(Controller::Cpu) && h.v1[0].has(Controller::Cpuacct));
        assert_eq!(h.v1[0].own.as_deref(), Some("/a"));
    }

    #[test]
    fn pure_v2_and_cgroupns_roots() {
        let mi = "30 23 0:26 /user.slice /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let h = CgroupHost::from_texts(mi, "0::/user.slice/app.scope\n", true);
        assert_eq!(h.mode, CgroupMode::Unified);
        let u = h.unified.unwrap();
        assert_eq!(u.own_dir().unwrap(), Path::new("/sys/fs/cgroup/app.scope"));
        assert_eq!(u.dir_of("/elsewhere"), None);
        assert_eq!(u.dir_of("/user.slice/../x"), None);
        assert_eq!(CgroupHost::from_texts("", "", false).mode, CgroupMode::Absent);
    }

    #[test]
    fn escaped_mount_points_are_decoded() {
        let mi = "41 31 0:38 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n";
        let h = CgroupHost::from_texts(mi, "", true);
        assert_eq!(h.unified.unwrap().path, Path::new("/mnt/cg two"));
    }

    #[test]
    fn delegation_walk_stops_at_the_first_foreign_directory() {
        use std::os::unix::fs::PermissionsExt;
        let t = std::env::temp_dir().join(format!("husk-deleg-{}", std::process::id()));
        let own = t.join("user.slice/user@1.service/app.slice/x.scope");
        std::fs::create_dir_all(&own).unwrap();
        let uid = nix::unistd::Uid::effective().as_raw();
        for d in [
            "user.slice/user@1.service",
            "user.slice/user@1.service/app.slice",
            "user.slice/user@1.service/app.slice/x.scope",
        ] {
            let f = t.join(d).join("cgroup.procs");
            std::fs::write(&f, "").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        // user.slice itself has no writable cgroup.procs: not delegated.
        assert_eq!(delegated_root(&t, &own, uid), Some(t.join("user.slice/user@1.service")));
        assert_eq!(delegated_root(&t, &own, uid + 1), None);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
