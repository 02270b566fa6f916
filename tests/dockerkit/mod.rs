//! A private dockerd for tests that compare with, or hand images to,
//! Docker: its own socket, data-root, exec-root and pidfile under a temp
//! dir, no iptables and no bridge (containers run with --network none),
//! stopped by pid on drop. Never the host's docker service.
#![allow(dead_code)]

use crate::imagekit::TempDir;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

pub struct Dockerd {
    child: Child,
    pub dir: TempDir,
    sock: String,
}

impl Dockerd {
    /// Starts dockerd; `insecure` registries (HOST:PORT) may be pulled
    /// from over plain HTTP. Panics (with its log) when it does not come up.
    pub fn start(insecure: &[&str]) -> Dockerd {
        let dir = TempDir::new("dockerd");
        let sock = format!("unix://{}", dir.join("docker.sock").display());
        let mut cmd = Command::new("dockerd");
        cmd.args(["--iptables=false", "--ip6tables=false", "--bridge=none"])
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("dockerd.pid"))
            .args(["-H", &sock]);
        for r in insecure {
            cmd.args(["--insecure-registry", r]);
        }
        let log = std::fs::File::create(dir.join("dockerd.log")).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("dockerd (apt-get install docker.io)");
        let d = Dockerd { child, dir, sock };
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

    /// `docker -H <private socket> ARGS`.
    pub fn docker(&self, args: &[&str]) -> Output {
        Command::new("docker").args(["-H", &self.sock]).args(args).stdin(Stdio::null()).output().expect("docker")
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
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        // SIGTERM: dockerd stops its containerd and unmounts its layers.
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
        // Whatever it left mounted under its private root goes before the
        // temp dir is removed.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let root = self.dir.path().display().to_string();
        let mut points: Vec<&str> =
            mounts.lines().filter_map(|l| l.split(' ').nth(4)).filter(|p| p.starts_with(&root)).collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let _ = Command::new("umount").args(["-l", p]).status();
        }
    }
}
