//! Shared helpers for integration tests: they run the real `husk` binary on
//! the real kernel. A test that cannot run here prints `SKIP: <reason>` and
//! returns; scripts/test.sh fails the suite when any SKIP line appears in CI.
//!
//! Tests meant for both passes (root, and rootless as an unprivileged user)
//! live in a `mod rootless` of their file: scripts/test.sh runs the filter
//! `rootless::` as the `tester` user. Everything else may assume root
//! (and says `require_root!()`).
//!
//! Environment (set by scripts/test.sh; all optional when run as root from
//! the source tree):
//! - `HUSK_BIN`: the husk binary (default: cargo's `CARGO_BIN_EXE_husk`)
//! - `HUSK_PROBE`: the static husk-probe (default: built on first use)
//! - `HUSK_BUSYBOX_ROOTFS`: a busybox root with the probe in /usr/bin
//!   (default: built on first use under target/)
#![allow(dead_code)]

use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod tempdir;
#[allow(unused_imports)] // not every test crate uses it
pub use tempdir::TempDir;

pub fn husk_bin() -> PathBuf {
    match std::env::var_os("HUSK_BIN") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_BIN_EXE_husk")),
    }
}

/// `husk <args>` with stdin from /dev/null.
pub fn husk(args: &[&str]) -> Command {
    let mut c = Command::new(husk_bin());
    c.args(args);
    c.stdin(Stdio::null());
    c
}

pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Prints the visible skip marker.
pub fn skip(reason: &str) {
    println!("SKIP: {reason}");
    eprintln!("SKIP: {reason}");
}

/// Returns early from a test that needs root, with a SKIP line.
#[macro_export]
macro_rules! require_root {
    () => {
        if !common::is_root() {
            common::skip("needs root");
            return;
        }
    };
}

/// Runs `husk run --json [extra] -- cmd...` and returns (verdict, exit code).
pub fn run_json(extra: &[&str], cmd: &[&str]) -> (serde_json::Value, i32) {
    let mut args = vec!["run", "--json"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(cmd);
    let out = husk(&args).output().expect("spawn husk");
    (verdict_of(&out), out.status.code().unwrap_or(-1))
}

pub fn verdict_of(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON verdict ({e}):\nstdout: {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Captured stdout text of a verdict.
pub fn stdout_of(v: &serde_json::Value) -> String {
    v["stdout"]["text"].as_str().unwrap_or_default().to_string()
}

pub fn stderr_of(v: &serde_json::Value) -> String {
    v["stderr"]["text"].as_str().unwrap_or_default().to_string()
}

/// `sh -c SCRIPT` in a default host-mode sandbox; returns the verdict.
pub fn sh(script: &str) -> serde_json::Value {
    run_json(&[], &["sh", "-c", script]).0
}

// ---------------------------------------------------------------- probe --

/// Where the probe appears inside host-mode sandboxes (bound read-only).
pub const PROBE: &str = "/husk-probe";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The static husk-probe: `$HUSK_PROBE`, else built (once per test binary)
/// with the command in tests/probe/README.md.
pub fn probe_path() -> &'static Path {
    static PROBE_PATH: OnceLock<PathBuf> = OnceLock::new();
    PROBE_PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("HUSK_PROBE") {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "HUSK_PROBE={} does not exist", p.display());
            return p;
        }
        let target_dir = manifest_dir().join("target");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        // Release profile: the outer `cargo test` holds the debug profile's lock.
        // Static via .cargo/config.toml (crt-static for the gnu target).
        let status = Command::new(cargo)
            .args(["build", "--release", "-p", "husk-probe", "--target-dir"])
            .arg(&target_dir)
            .current_dir(manifest_dir())
            .status()
            .expect("run cargo to build husk-probe");
        assert!(status.success(), "building husk-probe failed");
        target_dir.join("x86_64-unknown-linux-gnu/release/husk-probe")
    })
}

/// A busybox root with the probe at /usr/bin/husk-probe:
/// `$HUSK_BUSYBOX_ROOTFS`, else built once under target/.
pub fn busybox_rootfs() -> &'static Path {
    static ROOTFS: OnceLock<PathBuf> = OnceLock::new();
    ROOTFS.get_or_init(|| {
        if let Some(p) = std::env::var_os("HUSK_BUSYBOX_ROOTFS") {
            let p = PathBuf::from(p);
            assert!(p.join("bin/busybox").is_file(), "HUSK_BUSYBOX_ROOTFS={} has no bin/busybox", p.display());
            return p;
        }
        let dir = manifest_dir().join("target/husk-busybox-rootfs");
        let out = Command::new(manifest_dir().join("scripts/build-busybox-rootfs.sh"))
            .arg(&dir)
            .arg(probe_path())
            .output()
            .expect("run scripts/build-busybox-rootfs.sh");
        assert!(out.status.success(), "build-busybox-rootfs.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        dir
    })
}

/// Where the sandbox's root comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    /// Host mode, the probe bound at /husk-probe.
    Host,
    /// The busybox rootfs, probe at /usr/bin/husk-probe.
    Busybox,
}

impl Root {
    pub const BOTH: [Root; 2] = [Root::Host, Root::Busybox];

    /// husk options that select this root and make the probe available.
    pub fn args(self) -> Vec<String> {
        match self {
            Root::Host => vec!["--bind".into(), format!("{}:{PROBE}", probe_path().display())],
            Root::Busybox => vec!["--rootfs".into(), busybox_rootfs().display().to_string()],
        }
    }

    /// The probe's path inside the sandbox.
    pub fn probe(self) -> &'static str {
        match self {
            Root::Host => PROBE,
            Root::Busybox => "/usr/bin/husk-probe",
        }
    }
}

/// One `husk run --json` of the probe (or of a script calling it).
#[derive(Debug)]
pub struct Run {
    pub verdict: Value,
    /// husk's own exit code.
    pub code: i32,
    /// Every JSON line the probe printed (non-JSON lines are skipped).
    pub reports: Vec<Value>,
}

impl Run {
    /// The single probe report (panics with the verdict if there is none).
    pub fn report(&self) -> &Value {
        self.reports.first().unwrap_or_else(|| panic!("no probe report; verdict: {:#}", self.verdict))
    }
}

fn parse_reports(v: &Value) -> Vec<Value> {
    stdout_of(v).lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|j| j.is_object()).collect()
}

/// `husk run --json <root args> <extra> -- <cmd>` where `cmd` may refer to the
/// probe as `{probe}`.
pub fn run_in(root: Root, extra: &[&str], cmd: &[&str]) -> Run {
    let probe = root.probe();
    let mut args: Vec<String> = vec!["run".into(), "--json".into()];
    args.extend(root.args());
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("--".into());
    args.extend(cmd.iter().map(|s| s.replace("{probe}", probe)));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = husk(&refs).output().expect("spawn husk");
    let verdict = verdict_of(&out);
    let reports = parse_reports(&verdict);
    Run { verdict, code: out.status.code().unwrap_or(-1), reports }
}

/// The probe with `args`, in a sandbox with `root` and `extra` options.
pub fn probe_in(root: Root, extra: &[&str], args: &[&str]) -> Run {
    let mut cmd = vec!["{probe}"];
    cmd.extend_from_slice(args);
    run_in(root, extra, &cmd)
}

/// The probe in a default host-mode sandbox.
pub fn probe(args: &[&str]) -> Run {
    probe_in(Root::Host, &[], args)
}

/// A shell script in the sandbox; `{probe}` expands to the probe's path.
/// Each probe call prints one report line.
pub fn script_in(root: Root, extra: &[&str], script: &str) -> Run {
    run_in(root, extra, &["sh", "-c", script])
}

// ---------------------------------------------------------------- host --

/// A name no other test or run shares (for markers and temp dirs).
pub fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("husk-test-{tag}-{}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed), nanos % 1_000_000_000)
}

/// Host pids whose argv contains `marker`.
pub fn host_pids_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return found };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && String::from_utf8_lossy(&cmd).contains(marker)
        {
            found.push(pid);
        }
    }
    found
}

/// Polls `cond` every 20 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The host uid/gid that sandbox root is mapped to: the `husk` entry of
/// /etc/subuid and /etc/subgid (else 1000000000) as root; the invoking user
/// rootless.
pub fn mapped_root() -> (u32, u32) {
    if !is_root() {
        return (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    }
    let base = |file: &str| {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    let mut f = l.split(':');
                    (f.next()? == "husk").then(|| f.next()?.trim().parse::<u32>().ok())?
                })
            })
            .unwrap_or(1_000_000_000)
    };
    (base("/etc/subuid"), base("/etc/subgid"))
}

pub fn owner(path: &Path) -> (u32, u32) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    (m.uid(), m.gid())
}

/// Copies the husk binary into `dir` (for tests that own or chmod it).
pub fn copy_husk_to(dir: &Path) -> PathBuf {
    let dst = dir.join("husk");
    std::fs::copy(husk_bin(), &dst).expect("copy husk");
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).expect("chmod husk copy");
    dst
}

/// An unprivileged host user to run rootless checks as, when the tests run
/// as root: `tester` if it exists, else nobody.
pub fn unprivileged_user() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let find = |name: &str| {
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
        })
    };
    find("tester").or_else(|| find("nobody")).unwrap_or((65534, 65534))
}

/// runsc on this host (scripts/test.sh installs Debian's package).
pub fn runsc_installed() -> bool {
    ["/usr/bin/runsc", "/usr/local/bin/runsc", "/usr/sbin/runsc"].iter().any(|p| std::path::Path::new(p).exists())
}

#[macro_export]
macro_rules! require_runsc {
    () => {
        if !$crate::common::runsc_installed() {
            $crate::common::skip("runsc is not installed (scripts/test.sh installs Debian's runsc package)");
            return;
        }
    };
}

/// What gVisor's kernel answers to `uname -v`: proof a command ran on it.
pub const GVISOR_UNAME_V: &str = "#1 SMP Sun Jan 10 15:06:54 PST 2016";

/// Reads from `c` until the end of an HTTP request head (`\r\n\r\n`);
/// None if the peer closed or failed first.
pub fn read_http_head(c: &mut std::net::TcpStream) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some(buf)
}

/// An HTTP server on 127.0.0.1: answers every request with `body_len`
/// bytes and keeps each request head it got.
pub struct Web {
    pub port: u16,
    pub heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

pub fn web(body_len: usize) -> Web {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = heads.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let h = h.clone();
            std::thread::spawn(move || {
                let Some(buf) = read_http_head(&mut c) else { return };
                h.lock().unwrap().push(String::from_utf8_lossy(&buf).into_owned());
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\nConnection: close\r\n\r\n");
                let _ = std::io::Write::write_all(&mut c, head.as_bytes());
                let _ = std::io::Write::write_all(&mut c, &vec![b'x'; body_len]);
            });
        }
    });
    Web { port, heads }
}
