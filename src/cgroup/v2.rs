//! cgroup v2 (unified hierarchy): one directory carries the limits, the
//! membership (the sandbox is cloned straight into it with
//! CLONE_INTO_CGROUP) and the group kill (cgroup.kill). The unified-leaf
//! helpers here (kill, cpu accounting) also serve the hybrid mode.

use super::fs;
use super::limits::{Limits, Swap};
use super::probe::{CgroupHost, Controller};
use super::report::{CgroupInfo, CpuLimit, Limit, LimitsReport, SwapLimit, Usage};
use super::stats::{Stat, Stats};
use super::{Caller, Cgroup, CgroupError, KillMethod, parent_in, purpose};
use nix::unistd::Pid;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long removal waits for a just-killed cgroup to empty.
/// The files a v2 cgroup's verdict numbers are read from.
pub(super) const STATS: [(Stat, &str); 5] = [
    (Stat::MemoryPeak, "memory.peak"),
    (Stat::MemoryEvents, "memory.events"),
    (Stat::CpuUsage, "cpu.stat"),
    (Stat::PidsPeak, "pids.peak"),
    (Stat::PidsEvents, "pids.events"),
];

pub(super) const PATIENCE: Duration = Duration::from_secs(2);

#[derive(Clone, Debug)]
pub struct Site {
    /// Highest directory husk may write (it enables controllers from here down).
    pub anchor: PathBuf,
    /// Where run leaves are created.
    pub parent: PathBuf,
    /// Controllers the leaf gets: those the limits need, plus memory and
    /// pids for accounting where available.
    pub controllers: Vec<Controller>,
    pub kill: KillMethod,
}

impl Site {
    pub fn choose(host: &CgroupHost, limits: &Limits, custom: Option<&Path>, who: Caller) -> Result<Site, CgroupError> {
        let mount = host.unified.as_ref().ok_or(CgroupError::NotMounted)?;
        let required = limits.required();
        let needed_for = required.first().map(|c| purpose(*c)).unwrap_or("accounting");
        let (anchor, parent) = parent_in(mount, custom, who, needed_for)?;
        let available: Vec<Controller> = if anchor == mount.path {
            mount.controllers.clone()
        } else {
            let text = fs::read(&anchor, "cgroup.controllers")?;
            text.split_whitespace().filter_map(Controller::from_name).collect()
        };
        for c in &required {
            if !available.contains(c) {
                let fix = if who.privileged {
                    format!(
                        "the kernel must offer it on cgroup v2 (is it bound to a v1 hierarchy? boot with systemd.unified_cgroup_hierarchy=1), or drop {}",
                        purpose(*c)
                    )
                } else {
                    "delegate it to your user (systemd: `Delegate=memory pids cpu` in /etc/systemd/system/user@.service.d/delegate.conf), or pass --no-cgroup".to_string()
                };
                return Err(CgroupError::MissingController {
                    controller: c.name(),
                    needed_for: purpose(*c),
                    place: format!("in {}/cgroup.controllers", anchor.display()),
                    fix,
                });
            }
        }
        let mut controllers = required;
        for c in [Controller::Memory, Controller::Pids] {
            if available.contains(&c) && !controllers.contains(&c) {
                controllers.push(c);
            }
        }
        let kill = if host.cgroup_kill { KillMethod::CgroupKill } else { KillMethod::Freeze };
        Ok(Site { anchor, parent, controllers, kill })
    }
}

/// Makes sure `parent` exists and hands `ctrls` to its children, enabling
/// them from `anchor` down. The common case (set up by an earlier run) is
/// one read.
fn ensure_parent(anchor: &Path, parent: &Path, ctrls: &[Controller]) -> Result<(), CgroupError> {
    if let Some(text) = fs::read_opt(parent, "cgroup.subtree_control")
        && missing(&text, ctrls).is_empty()
    {
        return Ok(());
    }
    let rel = parent.strip_prefix(anchor).unwrap_or(Path::new(""));
    let mut dir = anchor.to_path_buf();
    enable(&dir, ctrls)?;
    for comp in rel.components() {
        dir.push(comp);
        fs::mkdir_shared(&dir)?;
        enable(&dir, ctrls)?;
    }
    Ok(())
}

fn missing(subtree_control: &str, ctrls: &[Controller]) -> Vec<String> {
    ctrls
        .iter()
        .filter(|c| !subtree_control.split_whitespace().any(|x| x == c.name()))
        .map(|c| format!("+{}", c.name()))
        .collect()
}

/// Enables controllers for `dir`'s children (only adds; never disables
/// what someone else enabled).
pub(super) fn enable(dir: &Path, ctrls: &[Controller]) -> Result<(), CgroupError> {
    if ctrls.is_empty() {
        return Ok(());
    }
    let add = missing(&fs::read(dir, "cgroup.subtree_control")?, ctrls);
    if add.is_empty() { Ok(()) } else { fs::write(dir, "cgroup.subtree_control", &add.join(" ")) }
}

/// Kills every process in a unified-hierarchy cgroup.
pub(super) fn kill(dir: &Path, method: KillMethod) -> Result<(), CgroupError> {
    match method {
        KillMethod::CgroupKill => match fs::write(dir, "cgroup.kill", "1") {
            Err(CgroupError::Io { errno: nix::errno::Errno::ENOENT, .. }) => freeze_kill(dir),
            other => other,
        },
        KillMethod::Freeze => freeze_kill(dir),
        KillMethod::Signal => fs::kill_listed(dir),
    }
}

/// Before cgroup.kill (Linux < 5.14): freeze so nothing can fork while the
/// members are listed, SIGKILL them all (a fatal signal reaches frozen
/// tasks), thaw.
fn freeze_kill(dir: &Path) -> Result<(), CgroupError> {
    if fs::write(dir, "cgroup.freeze", "1").is_err() {
        return fs::kill_listed(dir);
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(200) {
        if fs::read_opt(dir, "cgroup.events").and_then(|t| fs::keyed(&t, "frozen")) == Some(1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let result = fs::kill_listed(dir);
    fs::write(dir, "cgroup.freeze", "0")?;
    result
}

/// Puts `pid` into the cgroup unless it was born there. Only the clone(2)
/// fallback (kernels before 5.7, or clone3 filtered) needs this: a
/// migration takes the kernel's threadgroup lock for writing, which costs an
/// RCU grace period (milliseconds) on most kernels, so it is skipped when
/// CLONE_INTO_CGROUP did the job.
pub(super) fn attach(dir: &Path, pid: Pid, born_inside: bool) -> Result<(), CgroupError> {
    if born_inside {
        return Ok(());
    }
    fs::write(dir, "cgroup.procs", &pid.as_raw().to_string())
}

pub struct V2Cgroup {
    dir: PathBuf,
    fd: OwnedFd,
    stats: Stats,
    kill: KillMethod,
    live: bool,
}

impl V2Cgroup {
    /// The sandbox's directory, made before clone (it is cloned into it).
    pub fn clone_dir(site: &Site, id: &str) -> Result<(PathBuf, OwnedFd), CgroupError> {
        ensure_parent(&site.anchor, &site.parent, &site.controllers)?;
        let dir = site.parent.join(id);
        fs::mkdir_new(&dir)?;
        let fd = fs::open_dir(&dir).inspect_err(|_| {
            let _ = std::fs::remove_dir(&dir);
        })?;
        Ok((dir, fd))
    }

    /// The limits on the directory `clone_dir` made (possibly while the
    /// sandbox already runs its setup inside it).
    pub fn create(
        site: &Site,
        limits: &Limits,
        (dir, fd): (PathBuf, OwnedFd),
    ) -> Result<(V2Cgroup, LimitsReport), CgroupError> {
        let mut cg = V2Cgroup { dir, fd, stats: Stats::default(), kill: site.kill, live: true };
        let report = cg.apply(limits)?;
        let d = &cg.dir;
        for (stat, file) in STATS {
            cg.stats.open(stat, d, file);
        }
        Ok((cg, report))
    }

    fn apply(&self, l: &Limits) -> Result<LimitsReport, CgroupError> {
        let d = &self.dir;
        let mut r = LimitsReport {
            cgroup: CgroupInfo {
                mode: "v2".into(),
                paths: vec![d.display().to_string()],
                membership: "clone_into_cgroup".into(),
                kill: self.kill.name().into(),
            },
            memory: Limit { requested: l.memory, source: Some(l.memory_source), ..Default::default() },
            pids: Limit { requested: l.pids, source: Some(l.pids_source), ..Default::default() },
            swap: SwapLimit { requested: "unlimited".into(), applied_bytes: None, how: "not limited".into() },
            cpus: None,
        };
        if let Some(m) = l.memory {
            r.memory.applied = write_limit(d, "memory.max", m)?;
            r.memory.file = Some("memory.max".into());
            r.swap = apply_swap(d, m, l.swap)?;
        }
        if let Some(c) = l.cpu {
            let text = fs::write_read(d, "cpu.max", &format!("{} {}", c.quota_us, c.period_us))?;
            let mut it = text.split_whitespace();
            let quota = it.next().and_then(|q| q.parse::<u64>().ok()).unwrap_or(0);
            let period = it.next().and_then(|p| p.parse::<u64>().ok()).unwrap_or(1).max(1);
            r.cpus = Some(CpuLimit {
                requested: c.millicores as f64 / 1000.0,
                applied: quota as f64 / period as f64,
                quota_us: quota,
                period_us: period,
                file: "cpu.max".into(),
            });
        }
        if let Some(p) = l.pids {
            r.pids.applied = write_limit(d, "pids.max", p)?;
            r.pids.file = Some("pids.max".into());
        }
        Ok(r)
    }
}

/// Writes a limit and reads back what the kernel holds (it may round).
pub(super) fn write_limit(dir: &Path, file: &str, value: u64) -> Result<Option<u64>, CgroupError> {
    Ok(fs::limit_value(&fs::write_read(dir, file, &value.to_string())?))
}

fn apply_swap(d: &Path, memory: u64, swap: Swap) -> Result<SwapLimit, CgroupError> {
    let (requested, allowance) = match swap {
        Swap::Unlimited => {
            return Ok(SwapLimit { requested: "unlimited".into(), applied_bytes: None, how: "not limited".into() });
        }
        Swap::Off => ("off", 0),
        Swap::Total(t) => ("limited", t - memory),
    };
    match write_limit(d, "memory.swap.max", allowance) {
        Ok(applied) => {
            Ok(SwapLimit { requested: requested.into(), applied_bytes: applied, how: "memory.swap.max".into() })
        }
        Err(CgroupError::Io { errno: nix::errno::Errno::ENOENT, .. }) if !fs::host_has_swap() => {
            Ok(SwapLimit { requested: requested.into(), applied_bytes: Some(0), how: "host has no swap".into() })
        }
        Err(CgroupError::Io { errno: nix::errno::Errno::ENOENT, .. }) => {
            Err(CgroupError::SwapUncontrolled { file: "memory.swap.max" })
        }
        Err(e) => Err(e),
    }
}

impl Cgroup for V2Cgroup {
    fn clone_into(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }

    fn join_self(&self) -> Result<(), nix::errno::Errno> {
        Ok(())
    }

    fn attach(&self, pid: Pid, born_inside: bool) -> Result<(), CgroupError> {
        attach(&self.dir, pid, born_inside)
    }

    fn kill_all(&self) -> Result<(), CgroupError> {
        kill(&self.dir, self.kill)
    }

    fn join_files(&self) -> &[OwnedFd] {
        &[]
    }

    fn usage(&self) -> Usage {
        self.stats.usage()
    }

    fn dirs(&self) -> Vec<super::Dir> {
        vec![super::Dir { path: self.dir.clone(), unified: true, controllers: Vec::new() }]
    }

    fn disown(&mut self) -> super::Leftover {
        self.stats.clear();
        self.live = false;
        super::Leftover::new(vec![self.dir.clone()], Some(self.dir.clone()), self.kill)
    }

    fn remove(&mut self) -> Result<(), CgroupError> {
        if !self.live {
            return Ok(());
        }
        self.stats.clear();
        let r = fs::rmdir(
            &self.dir,
            &|| {
                let _ = kill(&self.dir, self.kill);
            },
            PATIENCE,
        );
        self.live = false;
        r
    }
}

impl Drop for V2Cgroup {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freeze_fallback_and_signal_loop_kill_every_member() {
        // The kernel here has cgroup.kill; the fallbacks must work too.
        let host = CgroupHost::probe();
        let Some(u) = host.unified else {
            return println!("SKIP: no cgroup2 mount on this host");
        };
        fs::tests::kill_test(&u.path, |d| kill(d, KillMethod::Freeze));
        fs::tests::kill_test(&u.path, |d| kill(d, KillMethod::Signal));
        fs::tests::kill_test(&u.path, |d| kill(d, KillMethod::CgroupKill));
    }

    #[test]
    fn only_missing_controllers_are_enabled() {
        let ctrls = [Controller::Memory, Controller::Pids, Controller::Cpu];
        assert_eq!(missing("cpuset cpu io memory", &ctrls), vec!["+pids".to_string()]);
        assert!(missing("memory pids cpu", &ctrls).is_empty());
    }

    #[test]
    fn parent_chain_is_created_and_enabled_from_the_anchor_down() {
        // A temp dir standing in for the mount: plain files stand in for
        // the kernel's control files.
        let t = std::env::temp_dir().join(format!("husk-v2-{}", std::process::id()));
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("cgroup.subtree_control"), "memory\n").unwrap();
        let parent = t.join("a/husk");
        // mkdir of a/ makes no control files in a temp dir: enable fails
        // with ENOENT, naming the file, which is what fail-closed wants.
        let e = ensure_parent(&t, &parent, &[Controller::Memory, Controller::Pids]).unwrap_err();
        assert!(e.to_string().contains("a/cgroup.subtree_control"), "{e}");
        // Only the missing controller was written (cgroupfs writes do not
        // truncate, so a plain file keeps the old tail).
        assert!(std::fs::read_to_string(t.join("cgroup.subtree_control")).unwrap().starts_with("+pids"));
        std::fs::remove_dir_all(&t).unwrap();
    }
}
