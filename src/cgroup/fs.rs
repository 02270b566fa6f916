//! cgroupfs file access: every error names the file, the value and errno.
//! Files are small and the kernel answers from memory, so plain std I/O.

use super::CgroupError;
use nix::errno::Errno;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn errno_of(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

fn io(op: &'static str, path: PathBuf, value: Option<&str>, e: &std::io::Error) -> CgroupError {
    CgroupError::Io { op, path, value: value.map(str::to_string), errno: errno_of(e) }
}

pub fn write(dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
    let path = dir.join(file);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| io("writing", path, Some(value), &e))
}

/// Reads a control file (`crate::files::read_text`).
pub fn read(dir: &Path, file: &str) -> Result<String, CgroupError> {
    let path = dir.join(file);
    crate::files::read_text(&path).map_err(|e| io("reading", path, None, &e))
}

/// A file that may legitimately be absent (older kernels, controller off).
pub fn read_opt(dir: &Path, file: &str) -> Option<String> {
    crate::files::read_text(dir.join(file)).ok()
}

/// Writes a limit and reads back (on the same open file) what the kernel
/// now holds, for the verdict: it may round (v1 memory to pages).
pub fn write_read(dir: &Path, file: &str, value: &str) -> Result<String, CgroupError> {
    use std::os::unix::fs::FileExt;
    let path = dir.join(file);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| io("writing", path.clone(), Some(value), &e))?;
    f.write_all_at(value.as_bytes(), 0).map_err(|e| io("writing", path.clone(), Some(value), &e))?;
    let mut buf = [0u8; 128];
    let n = f.read_at(&mut buf, 0).map_err(|e| io("reading back", path.clone(), None, &e))?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// mkdir that fails on anything but success (a leaf must be new: an
/// existing one may belong to someone else).
pub fn mkdir_new(path: &Path) -> Result<(), CgroupError> {
    std::fs::create_dir(path).map_err(|e| io("creating cgroup", path.to_path_buf(), None, &e))
}

/// mkdir where an existing directory is fine (husk's shared parents).
pub fn mkdir_shared(path: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io("creating cgroup", path.to_path_buf(), None, &e)),
    }
}

/// rmdir of a cgroup husk created. A cgroup whose last task just died can
/// still read as populated for a moment; on EBUSY `kill` runs once and the
/// rmdir is retried until `patience` runs out.
///
/// A sandbox that could write its own cgroup (rootless, with a capability
/// to mount cgroupfs) may have made child cgroups in it; those are inside
/// husk's leaf, so they are removed first, deepest first.
pub fn rmdir(path: &Path, kill: &dyn Fn(), patience: Duration) -> Result<(), CgroupError> {
    let start = Instant::now();
    let mut killed = false;
    loop {
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if matches!(errno_of(&e), Errno::EBUSY | Errno::ENOTEMPTY) && start.elapsed() < patience => {
                if !killed {
                    kill();
                    killed = true;
                }
                if let Ok(entries) = std::fs::read_dir(path) {
                    for sub in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
                        let left = patience.saturating_sub(start.elapsed());
                        rmdir(&sub.path(), &|| {}, left)?;
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(io("removing cgroup", path.to_path_buf(), None, &e)),
        }
    }
}

/// Value of `key` in a flat-keyed file (`key value` lines: memory.events,
/// cpu.stat, pids.events, memory.oom_control).
pub fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// A limit file's value: `max` (and v1's huge page-rounded "unlimited")
/// is `None`.
pub fn limit_value(text: &str) -> Option<u64> {
    let t = text.trim();
    if t == "max" {
        return None;
    }
    t.parse::<u64>().ok().filter(|v| *v < (1 << 62))
}

/// Pids listed in a cgroup.procs text.
pub fn pids(text: &str) -> Vec<i32> {
    text.split_whitespace().filter_map(|p| p.parse().ok()).filter(|p| *p > 0).collect()
}

/// SIGKILLs every member listed in `dir`/cgroup.procs until none is left
/// (the fallback when neither cgroup.kill nor a freezer is available; a
/// member forking between read and kill is caught by the next round).
pub fn kill_listed(dir: &Path) -> Result<(), CgroupError> {
    for _ in 0..100 {
        let members = pids(&read(dir, "cgroup.procs")?);
        if members.is_empty() {
            return Ok(());
        }
        for p in members {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Err(CgroupError::Io { op: "killing the members of", path: dir.to_path_buf(), value: None, errno: Errno::EBUSY })
}

/// Opens a cgroup directory for CLONE_INTO_CGROUP (O_PATH is refused there).
pub fn open_dir(dir: &Path) -> Result<std::os::fd::OwnedFd, CgroupError> {
    use nix::fcntl::{OFlag, open};
    open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
        .map_err(|errno| CgroupError::Io { op: "opening cgroup", path: dir.to_path_buf(), value: None, errno })
}

/// Opens a control file for writing later (from the child, which must not
/// allocate or resolve paths).
pub fn open_write(dir: &Path, file: &str) -> Result<std::os::fd::OwnedFd, CgroupError> {
    use nix::fcntl::{OFlag, open};
    let path = dir.join(file);
    open(&path, OFlag::O_WRONLY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty()).map_err(|errno| CgroupError::Io {
        op: "opening",
        path,
        value: None,
        errno,
    })
}

/// Creates a run's leaf under `parent`, creating husk's shared parents
/// first only when they are missing (the common case is one mkdir).
pub fn mkdir_leaf(parent: &Path, leaf: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(leaf) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(parent).map_err(|e| io("creating cgroup", parent.to_path_buf(), None, &e))?;
            mkdir_new(leaf)
        }
        Err(e) => Err(io("creating cgroup", leaf.to_path_buf(), None, &e)),
        Ok(()) => Ok(()),
    }
}

/// Whether `host` swap is active (/proc/swaps lists a device): where swap
/// cannot be limited per cgroup, "no swap" still holds if there is none.
pub fn host_has_swap() -> bool {
    std::fs::read_to_string("/proc/swaps").map(|t| t.lines().skip(1).any(|l| !l.trim().is_empty())).unwrap_or(true)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Real-kernel check of a group kill: a test cgroup under `mount`
    /// holding three sleepers (one of them forked by a shell), killed by
    /// `kill`; every sleeper must die of SIGKILL. Needs root.
    pub fn kill_test(mount: &Path, kill: impl Fn(&Path) -> Result<(), CgroupError>) {
        use std::os::unix::process::ExitStatusExt;
        if !nix::unistd::Uid::effective().is_root() {
            return println!("SKIP: needs root");
        }
        let dir = mount.join(format!("husk-unit-kill-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let mut kids: Vec<std::process::Child> = (0..2)
            .map(|_| std::process::Command::new("sleep").arg("60").spawn().unwrap())
            .chain(std::iter::once(std::process::Command::new("sh").args(["-c", "sleep 60 & wait"]).spawn().unwrap()))
            .collect();
        for k in &kids {
            write(&dir, "cgroup.procs", &k.id().to_string()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
        let r = kill(&dir);
        let statuses: Vec<_> = kids.iter_mut().map(|k| k.wait().unwrap()).collect();
        // The shell's own child is in the cgroup too (it forked there).
        let left = pids(&read(&dir, "cgroup.procs").unwrap_or_default());
        std::thread::sleep(Duration::from_millis(20));
        std::fs::remove_dir(&dir).unwrap();
        r.unwrap();
        assert!(statuses.iter().all(|s| s.signal() == Some(libc::SIGKILL)), "{statuses:?}");
        assert!(left.is_empty(), "members left: {left:?}");
    }

    #[test]
    fn flat_keyed_files_parse() {
        let ev = "low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(ev, "oom_kill"), Some(1));
        assert_eq!(keyed(ev, "max"), Some(17));
        assert_eq!(keyed(ev, "oom"), Some(2));
        assert_eq!(keyed(ev, "missing"), None);
        let oc = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(keyed(oc, "oom_kill"), Some(3));
    }

    #[test]
    fn limit_values_parse() {
        assert_eq!(limit_value("max\n"), None);
        assert_eq!(limit_value("9223372036854771712\n"), None);
        assert_eq!(limit_value("268435456\n"), Some(268435456));
        assert_eq!(pids("12\n13\n0\n"), vec![12, 13]);
    }
}
