//! cgroup v1 and hybrid hosts: limits through the v1 controller
//! hierarchies (one directory per hierarchy husk joins), and on hybrid hosts
//! membership and kill through the unified hierarchy as well (clone into it,
//! cgroup.kill there). The v1 directories cannot be cloned into, so the
//! child moves itself into them by writing "0" to their `tasks` files:
//! first thing after clone when they were made before (see `join_self`),
//! or once the parent sends them (`Msg::CgroupReady`, `husk run`).

use super::fs;
use super::limits::{Limits, Swap};
use super::probe::{CgroupHost, CgroupMode, Controller};
use super::report::{CgroupInfo, CpuLimit, Limit, LimitsReport, SwapLimit, Usage};
use super::stats::{Stat, Stats};
use super::v2::{self, PATIENCE, write_limit};
use super::{Caller, Cgroup, CgroupError, KillMethod, parent_in, purpose};
use nix::unistd::Pid;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One v1 hierarchy husk joins.
#[derive(Clone, Debug)]
pub struct Node {
    pub mount: PathBuf,
    /// The controllers husk uses in it (co-mounted ones share a node).
    pub controllers: Vec<Controller>,
    pub parent: PathBuf,
}

#[derive(Clone, Debug)]
pub struct Site {
    pub hybrid: bool,
    pub nodes: Vec<Node>,
    /// Parent in the unified hierarchy (hybrid hosts), for clone-into and kill.
    pub unified: Option<PathBuf>,
    pub kill: KillMethod,
}

impl Site {
    pub fn choose(host: &CgroupHost, limits: &Limits, custom: Option<&Path>, who: Caller) -> Result<Site, CgroupError> {
        let unified = match &host.unified {
            Some(m) if host.mode == CgroupMode::Hybrid => parent_in(m, custom, who, "group kill").ok().map(|(_, p)| p),
            _ => None,
        };
        // Required: what the limits need. Wanted: accounting, and without a
        // unified leaf, cpu time (cpuacct) and a freezer for the group kill.
        let mut wanted: Vec<(Controller, bool)> = limits.required().into_iter().map(|c| (c, true)).collect();
        let mut extra = vec![Controller::Memory, Controller::Pids];
        if unified.is_none() {
            extra.extend([Controller::Cpuacct, Controller::Freezer]);
        }
        for c in extra {
            if !wanted.iter().any(|(w, _)| *w == c) {
                wanted.push((c, false));
            }
        }
        let mut nodes: Vec<Node> = Vec::new();
        for (c, required) in wanted {
            let Some(m) = host.v1_mount(c) else {
                if required {
                    return Err(CgroupError::MissingController {
                        controller: c.name(),
                        needed_for: purpose(c),
                        place: "(no v1 hierarchy carries it in /proc/self/mountinfo)".into(),
                        fix: format!(
                            "mount it (`mount -t cgroup -o {0} cgroup /sys/fs/cgroup/{0}`), or drop {1}",
                            c.name(),
                            purpose(c)
                        ),
                    });
                }
                continue;
            };
            if let Some(n) = nodes.iter_mut().find(|n| n.mount == m.path) {
                n.controllers.push(c);
                continue;
            }
            match parent_in(m, custom, who, purpose(c)) {
                Ok((_, parent)) => nodes.push(Node { mount: m.path.clone(), controllers: vec![c], parent }),
                Err(e) if required => return Err(e),
                Err(_) => {}
            }
        }
        let kill = match &unified {
            Some(_) if host.cgroup_kill => KillMethod::CgroupKill,
            Some(_) => KillMethod::Freeze,
            None if nodes.iter().any(|n| n.controllers.contains(&Controller::Freezer)) => KillMethod::Freeze,
            None => KillMethod::Signal,
        };
        Ok(Site { hybrid: host.mode == CgroupMode::Hybrid, nodes, unified, kill })
    }
}

/// The counters husk reads from a v1 directory carrying `c`. `memsw`: with
/// memory+swap capped, charges meet memsw's counter first. `unified_cpu`:
/// cpu time comes from a unified directory's cpu.stat, not cpuacct.
pub(super) fn stat_files(c: Controller, memsw: bool, unified_cpu: bool) -> &'static [(Stat, &'static str)] {
    match c {
        Controller::Cpuacct if unified_cpu => &[],
        Controller::Memory if memsw => &[
            (Stat::MemoryPeak, "memory.max_usage_in_bytes"),
            (Stat::MemoryFailcnt, "memory.memsw.failcnt"),
            (Stat::OomControl, "memory.oom_control"),
        ],
        Controller::Memory => &[
            (Stat::MemoryPeak, "memory.max_usage_in_bytes"),
            (Stat::MemoryFailcnt, "memory.failcnt"),
            (Stat::OomControl, "memory.oom_control"),
        ],
        Controller::Pids => &[(Stat::PidsPeak, "pids.peak"), (Stat::PidsEvents, "pids.events")],
        Controller::Cpuacct => &[(Stat::CpuacctUser, "cpuacct.usage_user"), (Stat::CpuacctSys, "cpuacct.usage_sys")],
        Controller::Cpu => &[(Stat::CpuThrottleV1, "cpu.stat")],
        Controller::Freezer => &[],
    }
}

pub struct V1Cgroup {
    nodes: Vec<(Vec<Controller>, PathBuf)>,
    /// Each node's `tasks` file, open for writing, for `join_self`.
    tasks: Vec<OwnedFd>,
    stats: Stats,
    unified: Option<(PathBuf, OwnedFd)>,
    kill: KillMethod,
    live: bool,
}

impl V1Cgroup {
    /// The unified-hierarchy directory the sandbox is cloned into (hybrid
    /// hosts), made before clone; `None` on pure v1 hosts.
    pub fn clone_dir(site: &Site, id: &str) -> Result<Option<(PathBuf, OwnedFd)>, CgroupError> {
        let Some(parent) = &site.unified else { return Ok(None) };
        let dir = parent.join(id);
        fs::mkdir_leaf(parent, &dir)?;
        match fs::open_dir(&dir) {
            Ok(fd) => Ok(Some((dir, fd))),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// The v1 directories with their limits, around the unified one
    /// `clone_dir` made (possibly while the sandbox already runs its setup).
    pub fn create(
        site: &Site,
        id: &str,
        limits: &Limits,
        unified: Option<(PathBuf, OwnedFd)>,
    ) -> Result<(V1Cgroup, LimitsReport), CgroupError> {
        // Dropping `cg` on any error below removes what was made so far.
        let mut cg = V1Cgroup {
            nodes: Vec::new(),
            tasks: Vec::new(),
            stats: Stats::default(),
            unified,
            kill: site.kill,
            live: true,
        };
        for n in &site.nodes {
            let dir = n.parent.join(id);
            fs::mkdir_leaf(&n.parent, &dir)?;
            cg.nodes.push((n.controllers.clone(), dir.clone()));
            cg.tasks.push(fs::open_write(&dir, "tasks")?);
        }
        let mut report = cg.apply(limits)?;
        cg.open_stats(report.swap.how == "memory.memsw.limit_in_bytes");
        report.cgroup = CgroupInfo {
            mode: if site.hybrid { "hybrid" } else { "v1" }.into(),
            paths: cg.dirs().map(|d| d.display().to_string()).collect(),
            membership: if cg.unified.is_some() { "clone_into_cgroup+self_attach" } else { "self_attach" }.into(),
            kill: site.kill.name().into(),
        };
        Ok((cg, report))
    }

    fn node(&self, c: Controller) -> Option<&Path> {
        self.nodes.iter().find(|(cs, _)| cs.contains(&c)).map(|(_, d)| d.as_path())
    }

    fn open_stats(&mut self, memsw: bool) {
        let mut s = Stats::default();
        for (cs, d) in &self.nodes {
            for &c in cs {
                for &(stat, file) in stat_files(c, memsw, self.unified.is_some()) {
                    s.open(stat, d, file);
                }
            }
        }
        if let Some((d, _)) = &self.unified {
            s.open(Stat::CpuUsage, d, "cpu.stat");
        }
        self.stats = s;
    }

    fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.nodes.iter().map(|(_, d)| d.as_path()).chain(self.unified.as_ref().map(|(d, _)| d.as_path()))
    }

    fn apply(&self, l: &Limits) -> Result<LimitsReport, CgroupError> {
        let mut r = LimitsReport {
            memory: Limit { requested: l.memory, source: Some(l.memory_source), ..Default::default() },
            pids: Limit { requested: l.pids, source: Some(l.pids_source), ..Default::default() },
            swap: SwapLimit { requested: "unlimited".into(), applied_bytes: None, how: "not limited".into() },
            ..Default::default()
        };
        // `choose` made every required controller a node; a missing node
        // here would be a bug, and must not pass as "applied".
        let need = |c: Controller| {
            self.node(c).ok_or(CgroupError::MissingController {
                controller: c.name(),
                needed_for: purpose(c),
                place: "in the plan".into(),
                fix: "report this as a husk bug".into(),
            })
        };
        if let Some(m) = l.memory {
            let d = need(Controller::Memory)?;
            r.memory.applied = write_limit(d, "memory.limit_in_bytes", m)?;
            r.memory.file = Some("memory.limit_in_bytes".into());
            r.swap = apply_swap(d, r.memory.applied.unwrap_or(m), l.swap)?;
        }
        if let Some(c) = l.cpu {
            let d = need(Controller::Cpu)?;
            let period = fs::write_read(d, "cpu.cfs_period_us", &c.period_us.to_string())?;
            let quota = fs::write_read(d, "cpu.cfs_quota_us", &c.quota_us.to_string())?;
            let period = period.trim().parse::<u64>().unwrap_or(1).max(1);
            let quota = quota.trim().parse::<u64>().unwrap_or(0);
            r.cpus = Some(CpuLimit {
                requested: c.millicores as f64 / 1000.0,
                applied: quota as f64 / period as f64,
                quota_us: quota,
                period_us: period,
                file: "cpu.cfs_quota_us".into(),
            });
        }
        if let Some(p) = l.pids {
            let d = need(Controller::Pids)?;
            r.pids.applied = write_limit(d, "pids.max", p)?;
            r.pids.file = Some("pids.max".into());
        }
        Ok(r)
    }
}

/// v1 freezer: freeze, SIGKILL every member, thaw (v1 frozen tasks only
/// die once thawed).
pub(super) fn freezer_kill(d: &Path) -> Result<(), CgroupError> {
    fs::write(d, "freezer.state", "FROZEN")?;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(200) {
        if fs::read_opt(d, "freezer.state").is_some_and(|s| s.trim() == "FROZEN") {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for p in fs::pids(&fs::read(d, "cgroup.procs")?) {
        let _ = nix::sys::signal::kill(Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
    }
    fs::write(d, "freezer.state", "THAWED")?;
    fs::kill_listed(d)
}

/// v1 swap: memory.memsw.limit_in_bytes caps memory + swap together.
fn apply_swap(d: &Path, memory: u64, swap: Swap) -> Result<SwapLimit, CgroupError> {
    let (requested, total) = match swap {
        Swap::Unlimited => {
            return Ok(SwapLimit { requested: "unlimited".into(), applied_bytes: None, how: "not limited".into() });
        }
        Swap::Off => ("off", memory),
        Swap::Total(t) => ("limited", t),
    };
    let file = "memory.memsw.limit_in_bytes";
    match write_limit(d, file, total) {
        Ok(applied) => Ok(SwapLimit {
            requested: requested.into(),
            applied_bytes: applied.map(|t| t.saturating_sub(memory)),
            how: file.into(),
        }),
        Err(CgroupError::Io { errno: nix::errno::Errno::ENOENT, .. }) if !fs::host_has_swap() => {
            Ok(SwapLimit { requested: requested.into(), applied_bytes: Some(0), how: "host has no swap".into() })
        }
        Err(CgroupError::Io { errno: nix::errno::Errno::ENOENT, .. }) => Err(CgroupError::SwapUncontrolled { file }),
        Err(e) => Err(e),
    }
}

impl Cgroup for V1Cgroup {
    fn clone_into(&self) -> Option<BorrowedFd<'_>> {
        self.unified.as_ref().map(|(_, fd)| fd.as_fd())
    }

    /// v1 hierarchies cannot be cloned into, so the child moves itself in
    /// before it does anything else: it writes "0" (itself) to each `tasks`
    /// file opened before clone. A single thread moving itself is the one
    /// migration the kernel does without taking the global threadgroup lock
    /// for writing; the parent writing the child's pid to cgroup.procs would
    /// wait out an RCU grace period (10-20 ms measured here) on every run.
    fn join_self(&self) -> Result<(), nix::errno::Errno> {
        join_self(&self.tasks)
    }

    /// The v1 hierarchies were joined by the child itself (`join_self`);
    /// only the unified one may still need the fallback.
    fn attach(&self, pid: Pid, born_inside: bool) -> Result<(), CgroupError> {
        if let Some((d, _)) = &self.unified {
            v2::attach(d, pid, born_inside)?;
        }
        Ok(())
    }

    fn kill_all(&self) -> Result<(), CgroupError> {
        if let Some((d, _)) = &self.unified {
            return v2::kill(d, self.kill);
        }
        match (self.kill, self.node(Controller::Freezer)) {
            (KillMethod::Freeze, Some(d)) => freezer_kill(d),
            _ => match self.nodes.first() {
                Some((_, d)) => fs::kill_listed(d),
                None => Ok(()),
            },
        }
    }

    fn join_files(&self) -> &[OwnedFd] {
        &self.tasks
    }

    fn usage(&self) -> Usage {
        self.stats.usage()
    }

    fn dirs(&self) -> Vec<super::Dir> {
        let v1 = self.nodes.iter().map(|(cs, d)| super::Dir {
            path: d.clone(),
            unified: false,
            controllers: cs.iter().map(|c| c.name().to_string()).collect(),
        });
        let unified =
            self.unified.iter().map(|(d, _)| super::Dir { path: d.clone(), unified: true, controllers: vec![] });
        v1.chain(unified).collect()
    }

    fn disown(&mut self) -> super::Leftover {
        self.tasks.clear();
        self.stats.clear();
        self.live = false;
        let unified = self.unified.take().map(|(d, _)| d);
        let mut dirs: Vec<PathBuf> = self.nodes.iter().map(|(_, d)| d.clone()).collect();
        dirs.extend(unified.clone());
        super::Leftover::new(dirs, unified, self.kill)
    }

    fn remove(&mut self) -> Result<(), CgroupError> {
        if !self.live {
            return Ok(());
        }
        self.tasks.clear();
        self.stats.clear();
        let mut first_err = None;
        let dirs: Vec<PathBuf> = self.dirs().map(Path::to_path_buf).collect();
        for d in dirs {
            let kill = || {
                let _ = self.kill_all();
            };
            if let Err(e) = fs::rmdir(&d, &kill, PATIENCE) {
                first_err.get_or_insert(e);
            }
        }
        self.live = false;
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for V1Cgroup {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// Moves the calling (single-threaded, just cloned) process into each v1
/// hierarchy whose `tasks` file is given, by writing "0" (itself) there.
pub fn join_self(tasks: &[OwnedFd]) -> Result<(), nix::errno::Errno> {
    for fd in tasks {
        nix::unistd::write(fd, b"0")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Peak memory, OOM kills and cpu time each come from one counter: the
    /// memsw failcnt when swap is capped, cpuacct only without a unified
    /// directory (whose cpu.stat is read instead).
    #[test]
    fn each_counter_is_read_from_one_file() {
        let files = |c, memsw, unified| stat_files(c, memsw, unified).iter().map(|(_, f)| *f).collect::<Vec<_>>();
        assert!(files(Controller::Memory, true, false).contains(&"memory.memsw.failcnt"));
        assert!(files(Controller::Memory, false, false).contains(&"memory.failcnt"));
        assert!(files(Controller::Cpuacct, false, true).is_empty());
        assert_eq!(files(Controller::Cpuacct, false, false), ["cpuacct.usage_user", "cpuacct.usage_sys"]);
        assert_eq!(files(Controller::Pids, true, true), ["pids.peak", "pids.events"]);
    }
    use crate::spec::LimitSpec;

    const HYBRID: &str = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
";
    const ROOT: Caller = Caller { uid: 0, privileged: true };

    fn limits(spec: LimitSpec) -> Limits {
        Limits::resolve(&spec, Default::default()).unwrap()
    }

    #[test]
    fn hybrid_joins_memory_and_pids_and_clones_into_unified() {
        let host = CgroupHost::from_texts(HYBRID, "0::/\n", true);
        let site = Site::choose(&host, &limits(LimitSpec::default()), None, ROOT).unwrap();
        let mounts: Vec<&str> = site.nodes.iter().map(|n| n.mount.to_str().unwrap()).collect();
        assert_eq!(mounts, ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"]);
        assert_eq!(site.nodes[0].parent, Path::new("/sys/fs/cgroup/memory/husk"));
        assert_eq!(site.unified.as_deref(), Some(Path::new("/sys/fs/cgroup/unified/husk")));
        assert_eq!(site.kill, KillMethod::CgroupKill);
        // --cpus adds the cpu hierarchy; a custom parent moves every node.
        let cpu = limits(LimitSpec { cpus_milli: Some(500), ..Default::default() });
        let site = Site::choose(&host, &cpu, Some(Path::new("ci/husk")), ROOT).unwrap();
        assert!(site.nodes.iter().any(|n| n.controllers == [Controller::Cpu]));
        assert!(site.nodes.iter().all(|n| n.parent.ends_with("ci/husk")));
    }

    #[test]
    fn pure_v1_uses_cpuacct_and_the_freezer() {
        let v1_only: String = HYBRID.lines().filter(|l| !l.contains("cgroup2")).map(|l| format!("{l}\n")).collect();
        let host = CgroupHost::from_texts(&v1_only, "", false);
        let site = Site::choose(&host, &limits(LimitSpec::default()), None, ROOT).unwrap();
        assert!(site.unified.is_none());
        assert_eq!(site.kill, KillMethod::Freeze);
        assert!(site.nodes.iter().any(|n| n.controllers == [Controller::Cpuacct]));
    }

    #[test]
    fn v1_freezer_kill_takes_every_member() {
        let host = CgroupHost::probe();
        let Some(m) = host.v1_mount(Controller::Freezer) else {
            return println!("SKIP: no v1 freezer hierarchy on this host (covered by the v2 freeze test)");
        };
        super::super::fs::tests::kill_test(&m.path, freezer_kill);
    }

    #[test]
    fn a_missing_required_controller_fails_closed() {
        let no_pids: String = HYBRID.lines().filter(|l| !l.contains("pids")).map(|l| format!("{l}\n")).collect();
        let host = CgroupHost::from_texts(&no_pids, "", true);
        let e = Site::choose(&host, &limits(LimitSpec::default()), None, ROOT).unwrap_err();
        assert!(e.to_string().contains("pids controller"), "{e}");
        // Without a pids limit the same host is fine (pids is only accounting then).
        let unl = limits(LimitSpec { pids: Some(super::super::limits::UNLIMITED), ..Default::default() });
        assert!(Site::choose(&host, &unl, None, ROOT).is_ok());
    }
}
