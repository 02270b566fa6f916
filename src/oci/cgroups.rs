//! The container's cgroup: `linux.cgroupsPath` + `linux.resources`, on the
//! cgroup v1 hierarchies of a hybrid host (one directory per controller,
//! what Docker's cgroupfs driver and containerd's shim expect: the shim
//! reads memory.oom_control and the stats there) or on a pure v2 host.
//!
//! cgroupsPath "/docker/<id>" is relative to each hierarchy's root; a
//! relative path is too (runc would nest it under its own cgroup, which for
//! a shim is the root). A systemd-style "slice:prefix:name" (containerd
//! 1.6 sends it when the CRI client asks for a systemd parent) is, as
//! runc's cgroupfs driver takes it, one directory of that literal name.

use super::config::Resources;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum OciCgroupError {
    #[error("linux.cgroupsPath {0:?}: '..' is not allowed")]
    DotDot(String),
    #[error("cgroup {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "linux.resources.{field}: this host has no {controller} cgroup controller mounted, so the limit cannot \
         be applied (refused rather than run without it)"
    )]
    NoController { field: &'static str, controller: &'static str },
    #[error("linux.resources.{field}: writing {value:?} to {path}: {source}")]
    Write { field: &'static str, path: PathBuf, value: String, source: std::io::Error },
    #[error("linux.resources.{0}: not supported by husk on this host (refused rather than ignored)")]
    Unsupported(&'static str),
    #[error("linux.resources.devices: {0}")]
    Devices(#[from] crate::cgroup::devices::DeviceError),
}

/// The cgroup hierarchies of this host.
#[derive(Debug, Clone)]
pub enum Layout {
    /// controller name -> mount point (cpu and cpuacct may share one).
    V1(BTreeMap<String, PathBuf>),
    /// The unified mount point.
    V2(PathBuf),
}

const V1_CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "blkio",
    "pids",
    "hugetlb",
    "net_cls",
    "net_prio",
    "perf_event",
];

impl Layout {
    /// Reads the cgroup mounts from /proc/self/mountinfo.
    pub fn probe() -> Layout {
        let info = crate::files::read_text("/proc/self/mountinfo").unwrap_or_default();
        let mut v1 = BTreeMap::new();
        let mut v2 = None;
        for line in info.lines() {
            let Some((left, right)) = line.split_once(" - ") else { continue };
            let mount_point = left.split_whitespace().nth(4).unwrap_or("");
            let mut r = right.split_whitespace();
            let fstype = r.next().unwrap_or("");
            let opts = r.nth(1).unwrap_or("");
            match fstype {
                "cgroup2" => v2 = v2.or(Some(PathBuf::from(mount_point))),
                "cgroup" => {
                    for o in opts.split(',') {
                        if V1_CONTROLLERS.contains(&o) {
                            v1.entry(o.to_string()).or_insert_with(|| PathBuf::from(mount_point));
                        }
                    }
                }
                _ => {}
            }
        }
        match v2 {
            Some(p) if v1.is_empty() => Layout::V2(p),
            _ => Layout::V1(v1),
        }
    }
}

/// Turns cgroupsPath into the path under each hierarchy's root.
pub fn relative_path(cgroups_path: Option<&str>, id: &str) -> Result<PathBuf, OciCgroupError> {
    let p = cgroups_path.filter(|p| !p.is_empty()).map(str::to_string).unwrap_or_else(|| format!("/{id}"));
    if Path::new(&p).components().any(|c| c == std::path::Component::ParentDir) {
        return Err(OciCgroupError::DotDot(p));
    }
    Ok(PathBuf::from(p.trim_start_matches('/')))
}

/// The container's cgroup directories, made.
#[derive(Debug, Default)]
pub struct Made {
    /// controller -> directory ("" for v2).
    pub dirs: BTreeMap<String, PathBuf>,
    /// Directories created here (deepest last), removed by `delete`.
    pub created: Vec<PathBuf>,
}

/// Makes the directories and writes the limits. The caller attaches init.
pub fn create(layout: &Layout, rel: &Path, res: &Resources) -> Result<Made, OciCgroupError> {
    let mut made = Made::default();
    match layout {
        Layout::V1(mounts) => {
            check_v1_controllers(mounts, res)?;
            for (ctl, mount) in mounts {
                let dir = mount.join(rel);
                if made.dirs.values().any(|d| d == &dir) {
                    made.dirs.insert(ctl.clone(), dir);
                    continue;
                }
                mkdirs(mount, rel, ctl == "cpuset", &mut made.created)?;
                made.dirs.insert(ctl.clone(), dir);
            }
            apply_v1(&made.dirs, res)?;
        }
        Layout::V2(mount) => {
            mkdirs_v2(mount, rel, &mut made.created)?;
            let dir = mount.join(rel);
            made.dirs.insert(String::new(), dir.clone());
            apply_v2(&dir, res)?;
        }
    }
    Ok(made)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OciCgroupError + '_ {
    move |source| OciCgroupError::Io { path: path.to_path_buf(), source }
}

/// mkdir -p under `mount`, remembering what was new. A new cpuset
/// directory is empty (no cpus, no mems: attaching fails with ENOSPC), so
/// every level on the way that is still empty, ours or one another
/// creator made and has not filled yet (a dockerd starting next to us),
/// inherits its parent's, as runc does.
fn mkdirs(mount: &Path, rel: &Path, cpuset: bool, created: &mut Vec<PathBuf>) -> Result<(), OciCgroupError> {
    retry_vanished_parent(|| mkdirs_once(mount, rel, cpuset, created))
}

/// Another container's delete may remove a shared parent between our
/// mkdir of it (EEXIST) and of the next level (ENOENT): start over.
fn retry_vanished_parent(mut f: impl FnMut() -> Result<(), OciCgroupError>) -> Result<(), OciCgroupError> {
    let mut tries = 0;
    loop {
        match f() {
            Err(OciCgroupError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound && tries < 10 => {
                tries += 1;
            }
            r => return r,
        }
    }
}

fn mkdirs_once(mount: &Path, rel: &Path, cpuset: bool, created: &mut Vec<PathBuf>) -> Result<(), OciCgroupError> {
    let mut dir = mount.to_path_buf();
    for c in rel.components() {
        let parent = dir.clone();
        dir.push(c);
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                if !created.contains(&dir) {
                    created.push(dir.clone());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(&dir)(e)),
        }
        if cpuset {
            fill_cpuset(&parent, &dir)?;
        }
    }
    Ok(())
}

/// cpuset.cpus and cpuset.mems of `dir` from `parent`'s where empty.
fn fill_cpuset(parent: &Path, dir: &Path) -> Result<(), OciCgroupError> {
    for f in ["cpuset.cpus", "cpuset.mems"] {
        let own = crate::files::read_text(dir.join(f)).map_err(io(dir))?;
        if !own.trim().is_empty() {
            continue;
        }
        let v = crate::files::read_text(parent.join(f)).map_err(io(parent))?;
        std::fs::write(dir.join(f), v.trim()).map_err(io(dir))?;
    }
    Ok(())
}

fn mkdirs_v2(mount: &Path, rel: &Path, created: &mut Vec<PathBuf>) -> Result<(), OciCgroupError> {
    retry_vanished_parent(|| mkdirs_v2_once(mount, rel, created))
}

fn mkdirs_v2_once(mount: &Path, rel: &Path, created: &mut Vec<PathBuf>) -> Result<(), OciCgroupError> {
    let mut dir = mount.to_path_buf();
    for c in rel.components() {
        // Delegate the controllers one level down before making the child.
        if let Ok(avail) = crate::files::read_text(dir.join("cgroup.controllers")) {
            let want: Vec<String> = avail
                .split_whitespace()
                .filter(|c| ["cpu", "cpuset", "memory", "pids", "io", "hugetlb"].contains(c))
                .map(|c| format!("+{c}"))
                .collect();
            if !want.is_empty() {
                let _ = std::fs::write(dir.join("cgroup.subtree_control"), want.join(" "));
            }
        }
        dir.push(c);
        match std::fs::create_dir(&dir) {
            Ok(()) if !created.contains(&dir) => created.push(dir.clone()),
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(&dir)(e)),
        }
    }
    Ok(())
}

fn check_v1_controllers(mounts: &BTreeMap<String, PathBuf>, res: &Resources) -> Result<(), OciCgroupError> {
    let need = |on: bool, field, controller: &'static str| {
        if on && !mounts.contains_key(controller) {
            Err(OciCgroupError::NoController { field, controller })
        } else {
            Ok(())
        }
    };
    need(res.memory.is_some(), "memory", "memory")?;
    need(res.pids_limit.is_some(), "pids", "pids")?;
    need(res.cpu_shares.is_some() || res.cpu_quota.is_some(), "cpu", "cpu")?;
    need(res.cpuset_cpus.is_some() || res.cpuset_mems.is_some(), "cpu.cpus", "cpuset")?;
    need(!res.devices.is_empty(), "devices", "devices")?;
    need(res.blkio_weight.is_some(), "blockIO", "blkio")?;
    need(!res.hugepages.is_empty(), "hugepageLimits", "hugetlb")?;
    if !res.unified.is_empty() {
        return Err(OciCgroupError::Unsupported("unified (cgroup v2 keys on a v1 host)"));
    }
    Ok(())
}

fn write(field: &'static str, dir: &Path, file: &str, value: impl ToString) -> Result<(), OciCgroupError> {
    let path = dir.join(file);
    let value = value.to_string();
    std::fs::write(&path, &value).map_err(|source| OciCgroupError::Write { field, path, value, source })
}

/// Writes `res` into a container's existing cgroup directories (`update`):
/// v2 when the map holds the unified directory ("" key), else v1.
pub fn apply(dirs: &BTreeMap<String, PathBuf>, res: &Resources) -> Result<(), OciCgroupError> {
    match dirs.get("") {
        Some(dir) => apply_v2(dir, res),
        None => apply_v1(dirs, res),
    }
}

fn apply_v1(dirs: &BTreeMap<String, PathBuf>, res: &Resources) -> Result<(), OciCgroupError> {
    if let (Some(m), Some(dir)) = (&res.memory, dirs.get("memory")) {
        let limit = m.limit.map(|l| if l < 0 { -1 } else { l });
        let memsw = dir.join("memory.memsw.limit_in_bytes").exists();
        let swap = m.swap.filter(|s| *s != 0);
        if swap.is_some_and(|s| s > 0) && !memsw {
            return Err(OciCgroupError::Unsupported("memory.swap (the kernel has no swap accounting: memory.memsw)"));
        }
        // memory.limit <= memsw.limit at every instant: raise memsw first
        // when the new limit grows, lower memory first when it shrinks.
        let current = crate::files::read_text(dir.join("memory.limit_in_bytes"))
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(i64::MAX);
        let grow = limit.is_some_and(|l| l == -1 || l > current);
        let set_swap = |d: &Path| match swap {
            Some(s) if memsw => write("memory.swap", d, "memory.memsw.limit_in_bytes", s),
            _ => Ok(()),
        };
        if grow {
            set_swap(dir)?;
        }
        if let Some(l) = limit {
            write("memory.limit", dir, "memory.limit_in_bytes", l)?;
        }
        if !grow {
            set_swap(dir)?;
        }
        if let Some(r) = m.reservation {
            write("memory.reservation", dir, "memory.soft_limit_in_bytes", r)?;
        }
        if let Some(s) = m.swappiness.filter(|s| *s <= 100) {
            write("memory.swappiness", dir, "memory.swappiness", s)?;
        }
        if m.disable_oom_killer == Some(true) {
            write("memory.disableOOMKiller", dir, "memory.oom_control", 1)?;
        }
    }
    if let (Some(p), Some(dir)) = (res.pids_limit, dirs.get("pids")) {
        write("pids.limit", dir, "pids.max", if p <= 0 { "max".to_string() } else { p.to_string() })?;
    }
    if let Some(dir) = dirs.get("cpu") {
        if let Some(s) = res.cpu_shares.filter(|s| *s > 0) {
            write("cpu.shares", dir, "cpu.shares", s)?;
        }
        if let Some(p) = res.cpu_period.filter(|p| *p > 0) {
            write("cpu.period", dir, "cpu.cfs_period_us", p)?;
        }
        if let Some(q) = res.cpu_quota.filter(|q| *q != 0) {
            write("cpu.quota", dir, "cpu.cfs_quota_us", q)?;
        }
    }
    if let Some(dir) = dirs.get("cpuset") {
        if let Some(c) = res.cpuset_cpus.as_deref().filter(|c| !c.is_empty()) {
            write("cpu.cpus", dir, "cpuset.cpus", c)?;
        }
        if let Some(m) = res.cpuset_mems.as_deref().filter(|m| !m.is_empty()) {
            write("cpu.mems", dir, "cpuset.mems", m)?;
        }
    }
    if let (Some(w), Some(dir)) = (res.blkio_weight, dirs.get("blkio")) {
        let file = if dir.join("blkio.weight").exists() { "blkio.weight" } else { "blkio.bfq.weight" };
        write("blockIO.weight", dir, file, w)?;
    }
    if let Some(dir) = dirs.get("hugetlb") {
        for (size, limit) in &res.hugepages {
            write("hugepageLimits", dir, &format!("hugetlb.{size}.limit_in_bytes"), limit)?;
        }
    }
    if let Some(dir) = dirs.get("devices") {
        for rule in &res.devices {
            let file = if rule.allow { "devices.allow" } else { "devices.deny" };
            write("devices", dir, file, rule.v1_line())?;
        }
    }
    Ok(())
}

fn apply_v2(dir: &Path, res: &Resources) -> Result<(), OciCgroupError> {
    if let Some(m) = &res.memory {
        if let Some(l) = m.limit {
            write("memory.limit", dir, "memory.max", if l < 0 { "max".into() } else { l.to_string() })?;
        }
        if let (Some(s), Some(l)) = (m.swap, m.limit) {
            // v1's swap is memory+swap; v2's memory.swap.max is swap alone.
            let v = if s < 0 { "max".into() } else { (s - l).max(0).to_string() };
            write("memory.swap", dir, "memory.swap.max", v)?;
        }
        if let Some(r) = m.reservation {
            write("memory.reservation", dir, "memory.low", r)?;
        }
    }
    if let Some(p) = res.pids_limit {
        write("pids.limit", dir, "pids.max", if p <= 0 { "max".to_string() } else { p.to_string() })?;
    }
    if let Some(s) = res.cpu_shares.filter(|s| *s > 0) {
        // runc's conversion of shares (2..262144) to weight (1..10000).
        let w = 1 + ((s.clamp(2, 262_144) - 2) * 9999) / 262_142;
        write("cpu.shares", dir, "cpu.weight", w)?;
    }
    if res.cpu_quota.is_some() || res.cpu_period.is_some() {
        let q = res.cpu_quota.filter(|q| *q > 0).map(|q| q.to_string()).unwrap_or_else(|| "max".into());
        write("cpu.quota", dir, "cpu.max", format!("{q} {}", res.cpu_period.filter(|p| *p > 0).unwrap_or(100_000)))?;
    }
    if let Some(c) = res.cpuset_cpus.as_deref().filter(|c| !c.is_empty()) {
        write("cpu.cpus", dir, "cpuset.cpus", c)?;
    }
    if let Some(m) = res.cpuset_mems.as_deref().filter(|m| !m.is_empty()) {
        write("cpu.mems", dir, "cpuset.mems", m)?;
    }
    if !res.devices.is_empty() {
        // v2's device controller is an eBPF program (cgroup/devices.rs),
        // attached before any process of the container is in the cgroup.
        let rules: Vec<crate::cgroup::devices::Rule> = res
            .devices
            .iter()
            .map(|d| crate::cgroup::devices::Rule {
                allow: d.allow,
                kind: d.kind,
                major: d.major.and_then(|m| u32::try_from(m).ok()),
                minor: d.minor.and_then(|m| u32::try_from(m).ok()),
                access: if d.access.is_empty() { "rwm".into() } else { d.access.clone() },
            })
            .collect();
        crate::cgroup::devices::apply(dir, &rules)?;
    }
    for (k, v) in &res.unified {
        if k.contains('/') || k.starts_with("cgroup.") {
            return Err(OciCgroupError::Unsupported("unified (a key naming a path or a cgroup.* file)"));
        }
        write("unified", dir, k, v)?;
    }
    Ok(())
}

/// Moves `pid` into every directory.
pub fn attach(dirs: &BTreeMap<String, PathBuf>, pid: i32) -> Result<(), OciCgroupError> {
    let mut done: Vec<&PathBuf> = Vec::new();
    for dir in dirs.values() {
        if done.contains(&dir) {
            continue;
        }
        let path = dir.join("cgroup.procs");
        std::fs::write(&path, pid.to_string()).map_err(io(&path))?;
        done.push(dir);
    }
    Ok(())
}

/// Every pid in the container's cgroup (one hierarchy is enough: all hold
/// the same processes; pids/memory first as they are always there).
pub fn pids(dirs: &BTreeMap<String, PathBuf>) -> Vec<i32> {
    let dir = ["", "pids", "memory", "freezer", "cpu"].iter().find_map(|c| dirs.get(*c)).or(dirs.values().next());
    dir.and_then(|d| crate::files::read_text(d.join("cgroup.procs")).ok())
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Removes the directories `create` made, deepest first. The
/// container's own directories (`leaves`) must go: one still holding
/// processes (EBUSY) is retried briefly while they exit. A parent husk made
/// on the way (e.g. /docker, or a ctr namespace) goes only when nothing else
/// is in it: while another container's cgroup lives below it, rmdir says
/// EBUSY (v1) or ENOTEMPTY (v2) and it stays for the last one out.
pub fn remove(created: &[PathBuf], leaves: &[PathBuf]) -> Result<(), OciCgroupError> {
    let mut sorted: Vec<&PathBuf> = created.iter().collect();
    sorted.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for dir in sorted {
        let leaf = leaves.contains(dir);
        let mut tries = 0;
        loop {
            match std::fs::remove_dir(dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && leaf && tries < 200 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(_) if !leaf => break,
                Err(e) => return Err(io(dir)(e)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroups_path_forms() {
        assert_eq!(relative_path(Some("/docker/abc"), "abc").unwrap(), PathBuf::from("docker/abc"));
        assert_eq!(relative_path(None, "abc").unwrap(), PathBuf::from("abc"));
        assert_eq!(
            relative_path(Some("system.slice:docker:abc"), "abc").unwrap(),
            PathBuf::from("system.slice:docker:abc")
        );
        assert!(matches!(relative_path(Some("/a/../../etc"), "x"), Err(OciCgroupError::DotDot(_))));
    }
}
