//! The real components an OCI runtime is driven by, started privately for
//! the tests of `husk` as a runc-compatible runtime (issue 22): Debian's
//! dockerd (tests/dockerkit; it starts its own containerd) and a bare containerd for
//! `ctr`, each with its own data root, exec/state root, socket and cgroup
//! parent, so nothing collides with another daemon on the host; plus OCI
//! bundles for driving the runtime's command line directly.
//!
//! The runtime under test is `HUSK_OCI_RUNTIME` (a path), else the husk
//! binary. With `HUSK_OCI_RUNTIME=/usr/sbin/runc` every test runs against
//! real runc: the tests encode runc's contract, not husk's reading of it.
//!
//! Everything a kit object starts is stopped by pid when it is dropped (a
//! panicking test included): containers, daemons, the shims they left,
//! mounts under the private directory and the cgroups made for it. The
//! daemons are shared by every test of one test binary (`shared()`,
//! started by the first test that asks) and stopped when that process
//! exits (atexit): one daemon start per file keeps the suite fast, and the
//! tests name their containers uniquely so they run side by side.
#![allow(dead_code)]

use crate::dockerkit;
use crate::imagekit::{self, Layout, TempDir};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const RUNC: &str = "/usr/sbin/runc";
pub const IMAGE: &str = "husk-test/busybox:latest";
pub const CTR_IMAGE: &str = "docker.io/husk-test/busybox:latest";
/// A bound on waiting for daemons and containers: liveness, not a speed claim.
const PATIENCE: Duration = Duration::from_secs(120);

/// The runtime binary under test.
pub fn runtime_bin() -> PathBuf {
    match std::env::var_os("HUSK_OCI_RUNTIME") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => imagekit::husk_bin(),
    }
}

/// True when the runtime under test is real runc (the reference run).
pub fn runtime_is_runc() -> bool {
    runtime_bin() == Path::new(RUNC)
}

/// A name no other test (or test process) uses.
pub fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("husk-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
pub fn show(o: &Output) -> String {
    format!("status {:?}\nstdout: {}\nstderr: {}", o.status, out(o), err(o))
}

/// Polls `f` until it returns Some, for at most PATIENCE.
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ------------------------------------------------------------ processes --

/// `/proc/PID/stat`: (state, ppid), or None when the pid is gone.
pub fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|rd| rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// Every live process whose command line mentions `needle`.
pub fn pids_mentioning(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    all_pids().into_iter().filter(|&p| p != me && cmdline(p).contains(needle)).collect()
}

/// `roots` and every process below them.
pub fn descendants(roots: &[i32]) -> Vec<i32> {
    let table: Vec<(i32, i32)> = all_pids().into_iter().filter_map(|p| Some((p, proc_stat(p)?.1))).collect();
    let mut found: Vec<i32> = roots.to_vec();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for &(p, pp) in &table {
            if pp == parent && !found.contains(&p) {
                found.push(p);
            }
        }
        i += 1;
    }
    found
}

fn kill(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

/// SIGTERM, a bounded wait, then SIGKILL; reaps it when it is our child.
fn stop_child(child: &mut Child) {
    kill(child.id() as i32, nix::sys::signal::Signal::SIGTERM);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// SIGKILL to processes that are not our children (shims reparented to
/// init), then a bounded wait for them to go.
fn kill_strays(pids: &[i32]) {
    for &p in pids {
        kill(p, nix::sys::signal::Signal::SIGKILL);
    }
    let start = Instant::now();
    while pids.iter().any(|&p| proc_stat(p).is_some_and(|(s, _)| s != 'Z')) && start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
}

// --------------------------------------------------------------- mounts --

/// Mount points at or below `dir` (this process's mount namespace).
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m == &prefix || m.starts_with(&format!("{prefix}/")))
        .collect()
}

/// Lazily unmounts everything below `dir`, deepest first.
fn unmount_under(dir: &Path) {
    let mut ms = mounts_under(dir);
    ms.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in ms {
        let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
}

// -------------------------------------------------------------- cgroups --

pub use crate::dockerkit::{cgroup_dirs, remove_cgroups};

/// The freezer's view of a cgroup: v1 `freezer.state`, else v2 `cgroup.events`.
pub fn frozen(cgroup: &str) -> Option<bool> {
    for dir in cgroup_dirs(cgroup) {
        if let Ok(s) = std::fs::read_to_string(dir.join("freezer.state")) {
            return Some(s.trim() == "FROZEN");
        }
    }
    for dir in cgroup_dirs(cgroup) {
        if let Ok(s) = std::fs::read_to_string(dir.join("cgroup.events"))
            && s.lines().any(|l| l.starts_with("frozen "))
        {
            return Some(s.lines().any(|l| l == "frozen 1"));
        }
    }
    None
}

// ---------------------------------------------------------------- image --

/// The busybox layer (the host's static busybox) as a plain rootfs tar.
pub fn busybox_rootfs_tar(dir: &Path) -> PathBuf {
    let tar = dir.join("busybox-rootfs.tar");
    std::fs::write(&tar, imagekit::busybox_tar()).unwrap();
    tar
}

/// An oci-archive of the busybox image named `CTR_IMAGE` (for `ctr image import`).
pub fn busybox_oci_archive(dir: &Path) -> PathBuf {
    let layout_dir = dir.join("busybox-layout");
    let mut layout = Layout::new(&layout_dir);
    let layer = imagekit::Layer::gzip(imagekit::busybox_tar());
    let cfg = json!({"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["sh"]});
    let mut desc = layout.image(&[layer], cfg, Some("latest"));
    desc["annotations"]["io.containerd.image.name"] = json!(CTR_IMAGE);
    layout.manifests = vec![desc];
    layout.write_index();
    let archive = dir.join("busybox-oci.tar");
    std::fs::write(&archive, imagekit::tar_dir(&layout_dir)).unwrap();
    archive
}

// --------------------------------------------------------------- shared --

/// One daemon for every test of this binary; stopped at exit.
pub struct Shared<T: 'static>(Mutex<Option<Arc<T>>>);

impl<T> Shared<T> {
    pub const fn new() -> Shared<T> {
        Shared(Mutex::new(None))
    }

    /// The daemon, started by the first caller (the others wait for it);
    /// `stop` (an `extern "C" fn` calling `self.stop()`) runs at exit.
    pub fn get(&self, start: impl FnOnce() -> T, stop: extern "C" fn()) -> Arc<T> {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            husk::sys::process::at_exit(stop).expect("atexit");
            *slot = Some(Arc::new(start()));
        }
        slot.as_ref().unwrap().clone()
    }

    /// Drops the daemon (its Drop stops it) once no test holds it; at exit
    /// every test has returned.
    pub fn stop(&self) {
        let taken = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        // A panic must not unwind out of an atexit handler.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(taken)));
    }
}

// ------------------------------------------------------------------ pty --

/// Runs `cmd` with its stdin, stdout and stderr on the slave of a pty this
/// test opens (a terminal, as a user's shell gives `docker run -it`), types
/// `input` once `trigger` shows on the master, and returns everything
/// read from the master and the exit status.
pub fn on_pty(mut cmd: Command, trigger: &str, input: &[u8]) -> (String, ExitStatus) {
    use std::io::{Read, Write};
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave = pty.slave;
    cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut child = cmd.spawn().expect("spawn on the pty");
    // Our copies of the slave go with the Command: the master reads EIO
    // once the child (and whatever it passed the slave to) is gone.
    drop(cmd);
    let mut master = std::fs::File::from(pty.master);
    let input = input.to_vec();
    let trigger = trigger.to_string();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        let mut typed = false;
        loop {
            match master.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
            if !typed && String::from_utf8_lossy(&seen).contains(&trigger) {
                master.write_all(&input).unwrap();
                typed = true;
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > PATIENCE {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (reader.join().unwrap(), status)
}

// --------------------------------------------------------------- dockerd --

/// tests/dockerkit's private dockerd with the runtime under test registered
/// as `husk` (runc stays its default), in a cgroup parent of its own, with
/// the busybox image imported as `IMAGE`.
pub struct Dockerd {
    pub daemon: dockerkit::Dockerd,
    /// The cgroup parent of every container (`--cgroup-parent`).
    pub cgroup_parent: String,
    pub runtime: PathBuf,
}

static DOCKERD: Shared<Dockerd> = Shared::new();
extern "C" fn stop_dockerd() {
    DOCKERD.stop()
}

impl Dockerd {
    /// The dockerd every test of this binary shares.
    pub fn shared() -> Arc<Dockerd> {
        DOCKERD.get(Dockerd::start, stop_dockerd)
    }

    pub fn start() -> Dockerd {
        let runtime = runtime_bin();
        let cgroup_parent = format!("/{}", unique("docker"));
        let daemon = dockerkit::Dockerd::start_with(&dockerkit::Options {
            runtimes: &[("husk", &runtime)],
            cgroup_parent: Some(&cgroup_parent),
            ..Default::default()
        });
        let tar = busybox_rootfs_tar(daemon.dir.path());
        daemon.ok(&["import", tar.to_str().unwrap(), IMAGE]);
        Dockerd { daemon, cgroup_parent, runtime }
    }

    pub fn dir(&self) -> &Path {
        self.daemon.dir.path()
    }

    pub fn docker(&self, args: &[&str]) -> Output {
        self.daemon.docker(args)
    }

    /// `docker run --runtime husk --network none ARGS...` (ARGS: options,
    /// the image, the command).
    pub fn run(&self, args: &[&str]) -> Output {
        self.docker(&[&["run", "--runtime", "husk", "--network", "none"], args].concat())
    }

    /// `docker inspect -f FORMAT ID`, trimmed.
    pub fn inspect(&self, id: &str, format: &str) -> String {
        self.daemon.ok(&["inspect", "-f", format, id]).trim().to_string()
    }

    /// The state directory of the `husk` runtime (dockerd passes it as --root).
    pub fn runtime_root(&self) -> PathBuf {
        self.dir().join("exec/runtime-husk/moby")
    }

    pub fn log(&self) -> String {
        self.daemon.log()
    }
}

// ----------------------------------------------------------- containerd --

/// A private containerd for `ctr`, in its own namespace; the runtime under
/// test is handed to the runc shim with `--runc-binary`.
pub struct Containerd {
    pub dir: TempDir,
    child: Child,
    pub sock: PathBuf,
    pub namespace: String,
    pub runtime: PathBuf,
}

static CONTAINERD: Shared<Containerd> = Shared::new();
extern "C" fn stop_containerd() {
    CONTAINERD.stop()
}

impl Containerd {
    /// The containerd every test of this binary shares.
    pub fn shared() -> Arc<Containerd> {
        CONTAINERD.get(Containerd::start, stop_containerd)
    }

    pub fn start() -> Containerd {
        let runtime = runtime_bin();
        let dir = TempDir::new("containerd");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let sock = dir.join("c.sock");
        let config = format!(
            "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\n\
             disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{sock}\"\n[ttrpc]\n  address = \"{sock}.ttrpc\"\n\
             [debug]\n  address = \"\"\n[metrics]\n  address = \"\"\n",
            root = dir.join("root").display(),
            state = dir.join("state").display(),
            sock = sock.display(),
        );
        std::fs::write(dir.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let child = Command::new("/usr/bin/containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("containerd (apt-get install containerd)");
        let namespace = unique("ctr");
        let c = Containerd { dir, child, sock, namespace, runtime };
        wait_for("containerd to answer", || c.ctr(&["version"]).status.success().then_some(()));
        let archive = busybox_oci_archive(c.dir.path());
        let o = c.ctr(&["image", "import", archive.to_str().unwrap()]);
        assert!(o.status.success(), "ctr image import: {}", show(&o));
        let o = c.ctr(&["image", "ls", "-q"]);
        assert!(out(&o).lines().any(|l| l == CTR_IMAGE), "ctr image ls: {}", show(&o));
        c
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new("/usr/bin/ctr");
        c.arg("--address").arg(&self.sock).args(["--namespace", &self.namespace]);
        c.stdin(Stdio::null());
        c
    }

    pub fn ctr(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("ctr")
    }

    /// The runtime's --root for the shim (`ctr run --runc-root`).
    pub fn runtime_root(&self) -> PathBuf {
        self.dir.join("runtime")
    }

    /// `ctr run` options that hand the runtime under test to the runc shim.
    pub fn run_args(&self) -> Vec<String> {
        vec![
            "--runtime".into(),
            "io.containerd.runc.v2".into(),
            "--runc-binary".into(),
            self.runtime.display().to_string(),
            "--runc-root".into(),
            self.runtime_root().display().to_string(),
        ]
    }

    /// `ctr run [run_args] OPTS... IMAGE ID ARGS...`
    pub fn run(&self, opts: &[&str], id: &str, args: &[&str]) -> Output {
        let mut c = self.cmd();
        c.arg("run").args(self.run_args()).args(opts).arg(CTR_IMAGE).arg(id).args(args);
        c.output().expect("ctr run")
    }

    /// The shims of this containerd's containers.
    pub fn shims(&self) -> Vec<i32> {
        pids_mentioning(&format!("-address {}", self.sock.display()))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let tasks = out(&self.ctr(&["task", "ls", "-q"]));
        for id in tasks.split_whitespace() {
            let _ = self.ctr(&["task", "kill", "-s", "SIGKILL", id]);
            let _ = self.ctr(&["task", "delete", "-f", id]);
        }
        let containers = out(&self.ctr(&["container", "ls", "-q"]));
        for id in containers.split_whitespace() {
            let _ = self.ctr(&["container", "rm", id]);
        }
        let shims = self.shims();
        stop_child(&mut self.child);
        kill_strays(&shims);
        unmount_under(self.dir.path());
        // ctr puts a container without --cgroup in /NAMESPACE/ID.
        remove_cgroups(&self.namespace);
    }
}

// -------------------------------------------------------------- bundles --

/// The runtime's command line with a private `--root`.
pub struct Runtime {
    pub bin: PathBuf,
    pub root: TempDir,
    /// Every id `create_cmd` was asked for: force-deleted on drop, so a
    /// failing test leaves no container behind.
    created: std::sync::Mutex<Vec<String>>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        for id in self.created.lock().unwrap().iter() {
            self.force_delete(id);
        }
    }
}

impl Runtime {
    pub fn new() -> Runtime {
        Runtime::with_bin(runtime_bin())
    }

    pub fn with_bin(bin: PathBuf) -> Runtime {
        Runtime { bin, root: TempDir::new("oci-root"), created: Default::default() }
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--root").arg(self.root.path()).args(args);
        c.stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("spawn the runtime")
    }

    /// `state ID` parsed, asserting success.
    pub fn state(&self, id: &str) -> Value {
        let o = self.run(&["state", id]);
        assert!(o.status.success(), "state {id}: {}", show(&o));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("state {id} is not JSON ({e}): {}", show(&o)))
    }

    pub fn status(&self, id: &str) -> String {
        self.state(id)["status"].as_str().unwrap_or_default().to_string()
    }

    /// `create --bundle B --pid-file F ID`; the pid. The container's
    /// stdout/stderr (and the runtime's) go to files of the bundle,
    /// `ID.out` and `ID.err`: a pipe would stay open as long as the
    /// container lives.
    pub fn create(&self, b: &Bundle, id: &str) -> i32 {
        let pid_file = b.dir.join(&format!("{id}.pid"));
        let so = std::fs::File::create(b.dir.join(&format!("{id}.out"))).unwrap();
        let se = std::fs::File::create(b.dir.join(&format!("{id}.err"))).unwrap();
        let status = self.create_cmd(b, id, &pid_file).stdout(so).stderr(se).status().unwrap();
        assert!(status.success(), "create {id}: {status:?}: {}", b.logged(id, "err"));
        read_pid_file(&pid_file)
    }

    pub fn create_cmd(&self, bundle: &Bundle, id: &str, pid_file: &Path) -> Command {
        self.created.lock().unwrap().push(id.to_string());
        let mut c = self.cmd(&["create", "--bundle"]);
        c.arg(bundle.dir.path()).arg("--pid-file").arg(pid_file).arg(id);
        c
    }

    pub fn start(&self, id: &str) {
        let o = self.run(&["start", id]);
        assert!(o.status.success(), "start {id}: {}", show(&o));
    }

    /// `delete --force ID`, ignoring failure (cleanup).
    pub fn force_delete(&self, id: &str) {
        let _ = self.run(&["delete", "--force", id]);
    }
}

/// The pid file's bytes must be a bare decimal number.
pub fn read_pid_file(path: &Path) -> i32 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("pid file {}: {e}", path.display()));
    text.parse().unwrap_or_else(|_| panic!("pid file {} holds {text:?}, not a bare pid", path.display()))
}

/// Makes this test process a child subreaper, once: a container's init,
/// orphaned when `create` returns, is reparented here as it is to the
/// containerd shim, and the test reaps it.
pub fn become_subreaper() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| nix::sys::prctl::set_child_subreaper(true).expect("PR_SET_CHILD_SUBREAPER"));
}

/// Waits for (reaps) a child of this process; its exit code, or 128+signal.
pub fn reap(pid: i32) -> i32 {
    use nix::sys::wait::{WaitStatus, waitpid};
    loop {
        match waitpid(nix::unistd::Pid::from_raw(pid), None) {
            Ok(WaitStatus::Exited(_, c)) => return c,
            Ok(WaitStatus::Signaled(_, s, _)) => return 128 + s as i32,
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => panic!("waitpid({pid}): {e}"),
        }
    }
}

/// An OCI bundle: a busybox rootfs and a config.json like `runc spec`'s
/// (root, not rootless), in a cgroup of its own.
pub struct Bundle {
    pub dir: TempDir,
    pub config: Value,
    /// The cgroupsPath (removed on drop).
    pub cgroup: String,
}

impl Bundle {
    pub fn new(args: &[&str]) -> Bundle {
        let dir = TempDir::new("bundle");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/build-busybox-rootfs.sh");
        let o = Command::new("sh").arg(script).arg(dir.join("rootfs")).output().unwrap();
        assert!(o.status.success(), "build-busybox-rootfs.sh: {}", show(&o));
        let cgroup = format!("/{}", unique("oci"));
        let config = base_config(args, &cgroup);
        let b = Bundle { dir, config, cgroup };
        b.write();
        b
    }

    /// Rewrites config.json from `self.config`.
    pub fn write(&self) {
        std::fs::write(self.dir.join("config.json"), serde_json::to_vec_pretty(&self.config).unwrap()).unwrap();
    }

    /// What `Runtime::create` logged for `id` (`out` or `err`).
    pub fn logged(&self, id: &str, which: &str) -> String {
        std::fs::read_to_string(self.dir.join(&format!("{id}.{which}"))).unwrap_or_default()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Adds a bind mount of the host path `dir` at the same path inside.
    pub fn bind_same_path(&mut self, dir: &Path) {
        let d = dir.to_string_lossy();
        self.config["mounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"destination": d, "type": "bind", "source": d, "options": ["rbind", "rw"]}));
    }
}

impl Drop for Bundle {
    fn drop(&mut self) {
        remove_cgroups(&self.cgroup);
    }
}

const CAPS: &[&str] = &["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"];

/// The config `runc spec` writes (runtime-spec 1.0.2), with `args`, no
/// terminal and a cgroupsPath.
pub fn base_config(args: &[&str], cgroup: &str) -> Value {
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
            "cwd": "/",
            "capabilities": {"bounding": CAPS, "effective": CAPS, "permitted": CAPS, "ambient": CAPS},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "husk-oci",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]}
        ],
        "linux": {
            "cgroupsPath": cgroup,
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "cgroup"}],
            "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
        }
    })
}
