//! A private dockerd for tests that compare with, or hand images to,
//! Docker, or drive husk as one of its runtimes: its own socket, data-root,
//! exec-root and pidfile under a temp dir, no iptables and no bridge
//! (containers run with --network none), optionally extra runtimes
//! (`--add-runtime`) and a cgroup parent of its own. Stopped by pid on
//! drop, with what it leaves behind: its containers, the containerd it
//! started and the shims of that containerd, mounts under its directory,
//! and its cgroup parent. Never the host's docker service.
#![allow(dead_code)]

use crate::imagekit::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How dockerd is started (`Options::default()`: no extra flags).
#[derive(Default)]
pub struct Options<'a> {
    /// Registries (HOST:PORT) it may pull from over plain HTTP.
    pub insecure: &'a [&'a str],
    /// `--add-runtime NAME=PATH`.
    pub runtimes: &'a [(&'a str, &'a Path)],
    /// `--cgroup-parent` (e.g. "/husk-test-..."): removed on drop.
    pub cgroup_parent: Option<&'a str>,
}

pub struct Dockerd {
    child: Child,
    pub dir: TempDir,
    sock: String,
    cgroup_parent: Option<String>,
}

impl Dockerd {
    /// Starts dockerd; `insecure` registries (HOST:PORT) may be pulled
    /// from over plain HTTP. Panics (with its log) when it does not come up.
    pub fn start(insecure: &[&str]) -> Dockerd {
        Dockerd::start_with(&Options { insecure, ..Options::default() })
    }

    pub fn start_with(opts: &Options<'_>) -> Dockerd {
        let dir = TempDir::new("dockerd");
        let sock = format!("unix://{}", dir.join("docker.sock").display());
        let mut cmd = Command::new("dockerd");
        cmd.args(["--iptables=false", "--ip6tables=false", "--bridge=none", "--ip-masq=false"])
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("dockerd.pid"))
            .args(["-H", &sock]);
        for r in opts.insecure {
            cmd.args(["--insecure-registry", r]);
        }
        for (name, path) in opts.runtimes {
            cmd.arg("--add-runtime").arg(format!("{name}={}", path.display()));
        }
        if let Some(p) = opts.cgroup_parent {
            cmd.args(["--cgroup-parent", p]);
        }
        let log = std::fs::File::create(dir.join("dockerd.log")).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("dockerd (apt-get install docker.io)");
        let d = Dockerd { child, dir, sock, cgroup_parent: opts.cgroup_parent.map(str::to_string) };
        // Readiness, not timing: poll until the API answers.
        for _ in 0..600 {
            if d.docker(&["info"]).status.success() {
                return d;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("dockerd did not start: {}", d.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
    }

    /// `docker -H <private socket>`, with no user configuration of the host.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new("docker");
        c.args(["-H", &self.sock]).env("DOCKER_CONFIG", self.dir.join("client")).stdin(Stdio::null());
        c
    }

    /// `docker -H <private socket> ARGS`.
    pub fn docker(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("docker")
    }

    /// Like `docker`, asserting success; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.docker(args);
        assert!(
            o.status.success(),
            "docker {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub fn data_root(&self) -> &Path {
        self.dir.path()
    }

    /// The API socket (`unix://...`).
    pub fn host(&self) -> &str {
        &self.sock
    }

    /// Processes that belong to this daemon besides dockerd itself: the
    /// containerd it started and that containerd's shims (reparented to
    /// init once started), found by the private paths on their command line.
    pub fn helpers(&self) -> Vec<i32> {
        let needle = self.dir.join("exec/containerd").display().to_string();
        let me = (std::process::id() as i32, self.child.id() as i32);
        let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
        rd.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&p| p != me.0 && p != me.1)
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(&needle))
            })
            .collect()
    }
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        // Containers first, so none outlives the daemon in a shim.
        let ids = String::from_utf8_lossy(&self.docker(&["ps", "-aq"]).stdout).into_owned();
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let _ = self.docker(&[&["rm", "-f"], ids.as_slice()].concat());
        }
        let helpers = self.helpers();
        // SIGTERM: dockerd stops its containerd and unmounts its layers; a
        // bounded wait, then SIGKILL.
        signal(self.child.id() as i32, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for p in &helpers {
            signal(*p, nix::sys::signal::Signal::SIGKILL);
        }
        let gone = |p: &i32| !PathBuf::from(format!("/proc/{p}")).exists();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) && !helpers.iter().all(gone) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whatever it left mounted under its private root goes before the
        // temp dir is removed.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let root = self.dir.path().display().to_string();
        let mut points: Vec<&str> =
            mounts.lines().filter_map(|l| l.split(' ').nth(4)).filter(|p| p.starts_with(&root)).collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let _ = nix::mount::umount2(p, nix::mount::MntFlags::MNT_DETACH);
        }
        if let Some(parent) = &self.cgroup_parent {
            remove_cgroups(parent);
        }
    }
}

/// The cgroup hierarchies' mount points (v1 controllers and the v2 one).
pub fn cgroup_roots() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" - cgroup ") || l.contains(" - cgroup2 "))
        .filter_map(|l| l.split(' ').nth(4).map(PathBuf::from))
        .collect()
}

/// Where the cgroup `rel` (a cgroupsPath) exists, in any hierarchy.
pub fn cgroup_dirs(rel: &str) -> Vec<PathBuf> {
    let rel = rel.trim_start_matches('/');
    cgroup_roots().into_iter().map(|r| r.join(rel)).filter(|p| p.is_dir()).collect()
}

/// Removes the cgroup `rel` and every cgroup below it, in every hierarchy
/// (only empty ones can go: a live process keeps its cgroup).
pub fn remove_cgroups(rel: &str) {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        if let Ok(rd) = std::fs::read_dir(d) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    walk(&e.path(), out);
                }
            }
        }
        out.push(d.to_path_buf());
    }
    for dir in cgroup_dirs(rel) {
        let mut dirs = Vec::new();
        walk(&dir, &mut dirs);
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}
